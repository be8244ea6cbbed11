package testenv

import (
	"net/url"
	"slices"
	"strings"
)

// s3Operation is one S3 API operation: how the recording proxy (S3Recorder)
// tells it from a path-style HTTP request, and what an IAM policy must
// allow for it on a general-purpose bucket and on a directory bucket (S3
// Express One Zone).
type s3Operation struct {
	Name   string // the API operation, as the SDK and AWS's docs name it
	Method string
	Object bool // the path names a key (else the bucket alone)
	// Marker are the query parameters that tell the operation apart ("name"
	// or "name=value"), all present; Params the others it may carry. Any
	// other query parameter (a subresource such as ?tagging) makes the
	// request another operation. The SDK's x-id, when sent, must be Name.
	Marker, Params []string
	Copy           bool // carries x-amz-copy-source
	// General is what a general-purpose bucket's policy must allow.
	General []grant
	// Directory is what a directory bucket's policy must allow; none when
	// the operation does not exist for directory buckets.
	Directory []grant
}

// grant is one IAM action on one resource of a request.
type grant struct {
	Action string
	On     resourceKind
	// Mode is the s3express:SessionMode an s3express:CreateSession grant
	// must allow for this operation.
	Mode sessionMode
}

type resourceKind int

const (
	onBucket resourceKind = iota
	onObject              // the request's key
	onSource              // the copy source's bucket or object
)

// sessionMode is a directory bucket session's mode, ReadOnly below
// ReadWrite. The SDK's CreateSession names no mode, so S3 creates the
// widest session the policy allows.
type sessionMode int

const (
	noSession sessionMode = iota
	readOnly
	readWrite
)

func (m sessionMode) String() string {
	switch m {
	case readOnly:
		return "ReadOnly"
	case readWrite:
		return "ReadWrite"
	}
	return ""
}

// session is s3express:CreateSession on the request's bucket (or the copy
// source's) in mode m: every object-level (zonal endpoint) operation on a
// directory bucket is authorized by the session, not by its own action.
func session(on resourceKind, m sessionMode) grant {
	return grant{Action: "s3express:CreateSession", On: on, Mode: m}
}

// s3Operations is the one table of the S3 operations the recording proxy
// can name and the IAM actions each needs, checked against the SDK's
// documentation of each operation (aws-sdk-go-v2/service/s3, api_op_*.go,
// "Permissions") and AWS's Service Authorization Reference ("Actions,
// resources, and condition keys for Amazon S3" and "... for Amazon S3
// Express"). The policies in deploy/iam are held to it by
// CheckIAMPolicies: they must allow what every recorded request needs and
// nothing more. A request no row matches fails that check: name the new
// operation here, with its actions, and the policies follow.
var s3Operations = []s3Operation{
	// PutObject, with If-None-Match and a checksum as the auditor sends it.
	{Name: "PutObject", Method: "PUT", Object: true,
		General: []grant{{Action: "s3:PutObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	// GET and HEAD need s3:GetObject; an absent key answers 404 only to a
	// caller that may also list the bucket (s3:ListBucket, unconditioned:
	// the request has no prefix to match), else 403, and the auditor tells
	// absence from refusal by it.
	{Name: "GetObject", Method: "GET", Object: true,
		General:   []grant{{Action: "s3:GetObject", On: onObject}, {Action: "s3:ListBucket", On: onBucket}},
		Directory: []grant{session(onBucket, readOnly)}},
	{Name: "HeadObject", Method: "HEAD", Object: true,
		General:   []grant{{Action: "s3:GetObject", On: onObject}, {Action: "s3:ListBucket", On: onBucket}},
		Directory: []grant{session(onBucket, readOnly)}},
	{Name: "DeleteObject", Method: "DELETE", Object: true,
		General: []grant{{Action: "s3:DeleteObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	// DeleteObjects needs s3:DeleteObject on each key of its body (the
	// recorder reads them).
	{Name: "DeleteObjects", Method: "POST", Marker: []string{"delete"},
		General: []grant{{Action: "s3:DeleteObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	{Name: "ListObjectsV2", Method: "GET", Marker: []string{"list-type=2"},
		Params:  []string{"prefix", "continuation-token", "delimiter", "max-keys", "start-after", "fetch-owner", "encoding-type"},
		General: []grant{{Action: "s3:ListBucket", On: onBucket}}, Directory: []grant{session(onBucket, readOnly)}},

	// Multipart uploads: creating, uploading and completing are
	// s3:PutObject; a part copied from another object also needs
	// s3:GetObject on the source (on a directory bucket source, a session
	// on it).
	{Name: "CreateMultipartUpload", Method: "POST", Object: true, Marker: []string{"uploads"},
		General: []grant{{Action: "s3:PutObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	{Name: "UploadPart", Method: "PUT", Object: true, Marker: []string{"partNumber", "uploadId"},
		General: []grant{{Action: "s3:PutObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	{Name: "UploadPartCopy", Method: "PUT", Object: true, Marker: []string{"partNumber", "uploadId"}, Copy: true,
		General:   []grant{{Action: "s3:PutObject", On: onObject}, {Action: "s3:GetObject", On: onSource}},
		Directory: []grant{session(onBucket, readWrite), session(onSource, readOnly)}},
	{Name: "CompleteMultipartUpload", Method: "POST", Object: true, Marker: []string{"uploadId"},
		General: []grant{{Action: "s3:PutObject", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	{Name: "AbortMultipartUpload", Method: "DELETE", Object: true, Marker: []string{"uploadId"},
		General: []grant{{Action: "s3:AbortMultipartUpload", On: onObject}}, Directory: []grant{session(onBucket, readWrite)}},
	{Name: "ListParts", Method: "GET", Object: true, Marker: []string{"uploadId"}, Params: []string{"part-number-marker", "max-parts"},
		General: []grant{{Action: "s3:ListMultipartUploadParts", On: onObject}}, Directory: []grant{session(onBucket, readOnly)}},
	{Name: "ListMultipartUploads", Method: "GET", Marker: []string{"uploads"},
		Params:  []string{"prefix", "key-marker", "upload-id-marker", "delimiter", "max-uploads", "encoding-type"},
		General: []grant{{Action: "s3:ListBucketMultipartUploads", On: onBucket}}, Directory: []grant{session(onBucket, readOnly)}},

	// The bucket rules the daemon and doctor read. A directory bucket's
	// lifecycle and encryption are regional-endpoint operations with
	// actions of their own; it has no versioning and no Object Lock, so
	// those reads need nothing there (they are refused, which reads as
	// unknown).
	{Name: "GetBucketLifecycleConfiguration", Method: "GET", Marker: []string{"lifecycle"},
		General:   []grant{{Action: "s3:GetLifecycleConfiguration", On: onBucket}},
		Directory: []grant{{Action: "s3express:GetLifecycleConfiguration", On: onBucket}}},
	{Name: "GetBucketEncryption", Method: "GET", Marker: []string{"encryption"},
		General:   []grant{{Action: "s3:GetEncryptionConfiguration", On: onBucket}},
		Directory: []grant{{Action: "s3express:GetEncryptionConfiguration", On: onBucket}}},
	{Name: "GetBucketVersioning", Method: "GET", Marker: []string{"versioning"},
		General: []grant{{Action: "s3:GetBucketVersioning", On: onBucket}}},
	{Name: "GetObjectLockConfiguration", Method: "GET", Marker: []string{"object-lock"},
		General: []grant{{Action: "s3:GetBucketObjectLockConfiguration", On: onBucket}}},

	// CreateBucket serves the tests, the demo and `novasim setup
	// --create-buckets`, never the auditor: it is named so that an auditor
	// request of it fails the check as a missing grant.
	{Name: "CreateBucket", Method: "PUT",
		General: []grant{{Action: "s3:CreateBucket", On: onBucket}}, Directory: []grant{{Action: "s3express:CreateBucket", On: onBucket}}},
}

// matchS3Operation is the table's row for a request: method, whether the
// path names a key, query and copy source. nil: no row (or two) matches.
func matchS3Operation(method string, object bool, q url.Values, copySource bool) *s3Operation {
	var found *s3Operation
	for i := range s3Operations {
		op := &s3Operations[i]
		if op.Method != method || op.Object != object || op.Copy != copySource || !op.queryMatches(q) {
			continue
		}
		if found != nil {
			return nil // the table is ambiguous: name neither
		}
		found = op
	}
	return found
}

func (op *s3Operation) queryMatches(q url.Values) bool {
	if id, ok := q["x-id"]; ok && (len(id) != 1 || id[0] != op.Name) {
		return false
	}
	for _, m := range op.Marker {
		name, want, hasValue := strings.Cut(m, "=")
		v, ok := q[name]
		if !ok || hasValue && (len(v) != 1 || v[0] != want) {
			return false
		}
	}
	for name := range q {
		known := name == "x-id" || slices.Contains(op.Params, name) ||
			slices.ContainsFunc(op.Marker, func(m string) bool { return strings.SplitN(m, "=", 2)[0] == name })
		if !known {
			return false
		}
	}
	return true
}
