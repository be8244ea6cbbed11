package testenv

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// sdkClient is an SDK client on a server that names every request it gets
// (and answers 501, so the client gives up at once).
func sdkClient(t *testing.T) (*s3.Client, func() []S3Call) {
	t.Helper()
	var mu sync.Mutex
	var got []S3Call
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls, err := nameS3(r)
		if err != nil {
			t.Errorf("name %s %s: %v", r.Method, r.URL, err)
		}
		if op := S3OpName(r); len(calls) > 0 && op != calls[0].Op {
			t.Errorf("%s %s: S3OpName says %q, the recorder %q", r.Method, r.URL, op, calls[0].Op)
		}
		mu.Lock()
		got = append(got, calls...)
		mu.Unlock()
		w.WriteHeader(http.StatusNotImplemented)
	}))
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.URL), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
		Retryer:     aws.NopRetryer{},
	})
	return c, func() []S3Call {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// TestNameS3 sends each operation of the table, and some it does not
// have, through the SDK as the store does, and checks the name the
// recorder gives each request: the SDK's own operation name, or none.
//
//nolint:errcheck // the server answers every request 501: the calls' errors are expected, the names are checked
func TestNameS3(t *testing.T) {
	c, calls := sdkClient(t)
	ctx := context.Background()
	b, k, id := aws.String("bkt"), aws.String("nova/stars/s1/chain/1"), aws.String("up1")
	sends := map[string]func(){
		"PutObject": func() {
			c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: k, Body: bytes.NewReader([]byte("x")), IfNoneMatch: aws.String("*")})
		},
		"GetObject": func() { c.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: k, Range: aws.String("bytes=-4")}) },
		"HeadObject": func() {
			c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: b, Key: k, ChecksumMode: types.ChecksumModeEnabled})
		},
		"DeleteObject": func() {
			c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: b, Key: k})
		},
		"DeleteObjects": func() {
			c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: b, Delete: &types.Delete{Quiet: aws.Bool(true),
				Objects: []types.ObjectIdentifier{{Key: k}, {Key: aws.String("nova/buckets/2")}}}})
		},
		"ListObjectsV2": func() {
			c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: b, Prefix: aws.String("nova/"), ContinuationToken: aws.String("t")})
		},
		"CreateMultipartUpload": func() {
			c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: b, Key: k,
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumType: types.ChecksumTypeFullObject})
		},
		"UploadPart": func() {
			c.UploadPart(ctx, &s3.UploadPartInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("x"))})
		},
		"UploadPartCopy": func() {
			c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: b, Key: k, UploadId: id, PartNumber: aws.Int32(2),
				CopySource: aws.String("src/nova/stars/s1/chain/a%20b"), CopySourceRange: aws.String("bytes=0-9")})
		},
		"CompleteMultipartUpload": func() {
			c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: b, Key: k, UploadId: id,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: aws.String(`"e"`)}}}})
		},
		"AbortMultipartUpload": func() { c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: b, Key: k, UploadId: id}) },
		"ListParts": func() {
			c.ListParts(ctx, &s3.ListPartsInput{Bucket: b, Key: k, UploadId: id, PartNumberMarker: aws.String("3")})
		},
		"ListMultipartUploads": func() {
			c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: b, Prefix: k, KeyMarker: aws.String("m"), UploadIdMarker: aws.String("u")})
		},
		"GetBucketLifecycleConfiguration": func() {
			c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: b})
		},
		"GetBucketEncryption":        func() { c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: b}) },
		"GetBucketVersioning":        func() { c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: b}) },
		"GetObjectLockConfiguration": func() { c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: b}) },
		"CreateBucket":               func() { c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: b}) },
		// not in the table: named as nothing
		"": func() {
			c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: b, Key: k, CopySource: aws.String("src/k")})
			c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: b, Key: k})
			c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: b, Key: k, Tagging: &types.Tagging{TagSet: []types.Tag{}}})
			c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: b})
			c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: b})
			c.ListBuckets(ctx, &s3.ListBucketsInput{})
			c.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: b})
			c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: b,
				VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}})
			c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: b})
			c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: b})
		},
	}
	for _, op := range s3Operations {
		if sends[op.Name] == nil {
			t.Errorf("the table's %s is not sent by this test", op.Name)
		}
	}
	for want, send := range sends {
		send()
		got := calls()
		if len(got) == 0 {
			t.Fatalf("%q: no request reached the server", want)
		}
		for _, c := range got {
			if c.Op != want {
				t.Errorf("a %q request was named %q (%+v)", want, c.Op, c)
			}
			if want != "" && c.Bucket != "bkt" {
				t.Errorf("%s: bucket %q", want, c.Bucket)
			}
		}
		switch want {
		case "DeleteObjects":
			if len(got) != 2 || got[0].Key != *k || got[1].Key != "nova/buckets/2" {
				t.Errorf("DeleteObjects: one call per key of the body, got %+v", got)
			}
		case "UploadPartCopy":
			if got[0].Source != "src/nova/stars/s1/chain/a b" || got[0].Key != *k {
				t.Errorf("UploadPartCopy: %+v", got[0])
			}
		case "":
			if len(got) != 10 {
				t.Errorf("%d requests not named, want 10: %+v", len(got), got)
			}
			for _, c := range got {
				if c.Request == "" {
					t.Errorf("a call not named says not what it was: %+v", c)
				}
			}
		default:
			if len(got) != 1 || (slices.ContainsFunc(s3Operations, func(o s3Operation) bool { return o.Name == want && o.Object }) && got[0].Key != *k) {
				t.Errorf("%s: %+v", want, got)
			}
		}
	}
}

// TestTableUnambiguous: no request shape of one row is taken by another.
func TestTableUnambiguous(t *testing.T) {
	for _, op := range s3Operations {
		q := map[string][]string{}
		for _, m := range op.Marker {
			name, v, _ := strings.Cut(m, "=")
			q[name] = []string{v}
		}
		if got := matchS3Operation(op.Method, op.Object, q, op.Copy); got == nil || got.Name != op.Name {
			t.Errorf("%s's own shape is named %v", op.Name, got)
		}
	}
}

// deployIAM is the repository's deploy/iam directory.
func deployIAM(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../deploy/iam")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// auditorCalls are calls of every operation the shipped policies grant
// for, as the auditor makes them (keys under the prefix nova/).
func auditorCalls() map[S3Call]int {
	calls := map[S3Call]int{}
	for _, op := range s3Operations {
		if op.Name == "CreateBucket" {
			continue
		}
		c := S3Call{Op: op.Name, Bucket: "b1"}
		if op.Object || op.Name == "DeleteObjects" {
			c.Key = "nova/stars/s1/chain/1"
		}
		if op.Copy {
			c.Source = "b2/nova/buckets/x"
		}
		calls[c]++
	}
	return calls
}

func checkCalls(t *testing.T, calls map[S3Call]int, general, directory string) *iamReport {
	t.Helper()
	rep, err := checkIAM(calls, IAMCheck{General: general, Directory: directory, KeyPrefix: "nova/", Complete: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func hasErr(rep *iamReport, sub string) bool {
	return slices.ContainsFunc(rep.errs, func(e string) bool { return strings.Contains(e, sub) })
}

// TestCheckIAMPolicies: the shipped policies pass the calls they are made
// for, and the check fails each way a policy or a recording can be wrong.
func TestCheckIAMPolicies(t *testing.T) {
	dir := deployIAM(t)
	general, directory := filepath.Join(dir, "auditor-policy.json"), filepath.Join(dir, "auditor-express-policy.json")
	if rep := checkCalls(t, auditorCalls(), general, directory); len(rep.errs) != 0 {
		t.Fatalf("the shipped policies against the calls they grant for: %q", rep.errs)
	}

	t.Run("missing", func(t *testing.T) {
		calls := auditorCalls()
		calls[S3Call{Op: "CreateBucket", Bucket: "b1"}] = 1
		calls[S3Call{Op: "PutObject", Bucket: "b1", Key: "elsewhere/k"}] = 1
		calls[S3Call{Request: "GET /b1/k?torrent"}] = 1
		rep := checkCalls(t, calls, general, directory)
		for _, want := range []string{"CreateBucket needs s3:CreateBucket on arn:aws:s3:::BUCKET_NAME",
			"CreateBucket needs s3express:CreateBucket", "PutObject needs s3:PutObject on arn:aws:s3:::BUCKET_NAME/elsewhere/k",
			"could not name GET /b1/k?torrent"} {
			if !hasErr(rep, want) {
				t.Errorf("no error %q in %q", want, rep.errs)
			}
		}
	})
	t.Run("unused", func(t *testing.T) {
		calls := auditorCalls()
		for c := range calls {
			if c.Op == "GetObjectLockConfiguration" || c.Op == "GetBucketEncryption" {
				delete(calls, c)
			}
		}
		rep := checkCalls(t, calls, general, directory)
		for _, want := range []string{"grants s3:GetBucketObjectLockConfiguration on arn:aws:s3:::BUCKET_NAME, which no recorded call needed",
			"grants s3express:GetEncryptionConfiguration"} {
			if !hasErr(rep, want) {
				t.Errorf("no error %q in %q", want, rep.errs)
			}
		}
		partial, err := checkIAM(calls, IAMCheck{General: general, Directory: directory, KeyPrefix: "nova/"})
		if err != nil || len(partial.errs) != 0 {
			t.Errorf("an incomplete recording failed on unused grants: %q %v", partial.errs, err)
		}
	})
	t.Run("read-only sessions", func(t *testing.T) {
		calls := map[S3Call]int{}
		for c, n := range auditorCalls() {
			if c.Op == "GetObject" || c.Op == "ListObjectsV2" {
				calls[c] = n
			}
		}
		rep := checkCalls(t, calls, general, directory)
		if !hasErr(rep, "allows ReadWrite sessions; the recorded calls need ReadOnly") {
			t.Errorf("a ReadWrite session for reads alone passed: %q", rep.errs)
		}
	})

	bad := func(name, from, old, new string) string {
		raw, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(raw, []byte(old)) {
			t.Fatalf("%s has no %q", from, old)
		}
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, bytes.Replace(raw, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("too wide", func(t *testing.T) {
		for _, c := range []struct{ name, from, old, new, want string }{
			{"whole bucket", general, `BUCKET_NAME/KEY_PREFIX*`, `BUCKET_NAME/*`, "allowed on keys outside the key prefix"},
			{"any bucket", general, `"arn:aws:s3:::BUCKET_NAME"`, `"arn:aws:s3:::*"`, "allowed on another bucket"},
			{"any directory bucket", directory, `bucket/DIRECTORY_BUCKET_NAME"`, `bucket/*"`, "allowed on another bucket"},
			{"extra action", general, `"s3:GetObject",`, `"s3:GetObject", "s3:GetObjectAcl",`, "grants s3:GetObjectAcl"},
			{"read-only session", directory, `"Resource": [
        "arn:aws:s3express:REGION:ACCOUNT_ID:bucket/DIRECTORY_BUCKET_NAME"
      ]
    },`, `"Resource": [
        "arn:aws:s3express:REGION:ACCOUNT_ID:bucket/DIRECTORY_BUCKET_NAME"
      ],
      "Condition": {"StringEquals": {"s3express:SessionMode": "ReadOnly"}}
    },`, "PutObject needs s3express:CreateSession on arn:aws:s3express:REGION:ACCOUNT_ID:bucket/DIRECTORY_BUCKET_NAME (a ReadWrite session)"},
		} {
			g, d := general, directory
			if c.from == general {
				g = bad(c.name+".json", c.from, c.old, c.new)
			} else {
				d = bad(c.name+".json", c.from, c.old, c.new)
			}
			if rep := checkCalls(t, auditorCalls(), g, d); !hasErr(rep, c.want) {
				t.Errorf("%s: no error %q in %q", c.name, c.want, rep.errs)
			}
		}
	})
	t.Run("refused documents", func(t *testing.T) {
		for name, c := range map[string]struct{ old, new string }{
			"wildcard action":  {`"s3:GetObject",`, `"s3:Get*",`},
			"deny":             {`"Effect": "Allow"`, `"Effect": "Deny"`},
			"not action":       {`"Action": [`, `"NotAction": [`},
			"unknown operator": {`"Effect": "Allow",`, `"Effect": "Allow", "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}},`},
		} {
			if _, err := ReadIAMPolicy(bad(strings.ReplaceAll(name, " ", "-")+".json", general, c.old, c.new)); err == nil {
				t.Errorf("%s: read without error", name)
			}
		}
	})
}

// TestWildMatch: IAM's * spans slashes, ? is one character.
func TestWildMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"arn:aws:s3:::b/p*", "arn:aws:s3:::b/p/x/y", true},
		{"arn:aws:s3:::b/p*", "arn:aws:s3:::b/q", false},
		{"arn:aws:s3:::b", "arn:aws:s3:::b/x", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"", "x", false},
	} {
		if got := wildMatch(c.pat, c.s); got != c.want {
			t.Errorf("wildMatch(%q, %q) = %v", c.pat, c.s, got)
		}
	}
}

// TestRecordS3 sends requests through the recorder to the real server:
// they arrive signed as sent (versitygw checks the signature against the
// proxy's host), their answers come back, and each is recorded once.
func TestRecordS3(t *testing.T) {
	rec := RecordS3(t, S3(t))
	e := rec.Env()
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(e.Endpoint), Region: e.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(e.AccessKey, e.SecretKey, ""),
	})
	ctx := context.Background()
	b := aws.String(BucketName("rec"))
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: b}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("nova"), 1<<20) // big enough for Expect: 100-continue
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("k/a b"), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("k/a b"), Range: aws.String("bytes=-4")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || string(got) != "nova" {
		t.Fatalf("ranged GET through the recorder: %q %v", got, err)
	}
	if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: b, Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("k/a b")}, {Key: aws.String("absent")}}}}); err != nil {
		t.Fatal(err)
	}
	want := map[S3Call]int{
		{Op: "CreateBucket", Bucket: *b}:                 1,
		{Op: "PutObject", Bucket: *b, Key: "k/a b"}:      1,
		{Op: "GetObject", Bucket: *b, Key: "k/a b"}:      1,
		{Op: "DeleteObjects", Bucket: *b, Key: "k/a b"}:  1,
		{Op: "DeleteObjects", Bucket: *b, Key: "absent"}: 1,
	}
	if got := rec.Calls(); !maps.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
}
