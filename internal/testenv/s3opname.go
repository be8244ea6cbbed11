package testenv

import (
	"net/http"
	"strings"
)

// S3OpName names a path-style request's S3 operation from its method,
// path, query and copy-source header (the s3ops.go table, as S3Recorder
// names it), for a transport that counts requests by operation; "" when no
// row of the table matches.
func S3OpName(req *http.Request) string {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	op := matchS3Operation(req.Method, key != "", req.URL.Query(), req.Header.Get("X-Amz-Copy-Source") != "")
	if op == nil || bucket == "" {
		return ""
	}
	return op.Name
}
