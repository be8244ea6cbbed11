package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/objstore/storetest"
)

// iamKeyPrefix is the key prefix of every store the IAM check records
// (the policies' KEY_PREFIX).
const iamKeyPrefix = "nova/"

// recordForIAM starts the recording proxy (testenv.RecordS3) the S3 crash
// matrix's auditor binaries go through, runs the store contract suite and
// `auditor doctor` (a standard bucket and two express zones) through it as
// parallel subtests beside the matrix, and, once every subtest of t has
// run, holds deploy/iam's policies to the calls recorded
// (testenv.CheckIAMPolicies). Buckets are made, and the test's own checks
// read, around the proxy: only the auditor's store is recorded. A grant no
// call needed fails the check only when the whole test ran and passed (a
// -run pattern below it records part of the calls).
func recordForIAM(t *testing.T) *testenv.S3Recorder {
	rec := testenv.RecordS3(t, testenv.S3(t))
	t.Cleanup(func() {
		testenv.CheckIAMPolicies(t, rec.Calls(), testenv.IAMCheck{
			General:   filepath.Join("..", "..", "deploy", "iam", "auditor-policy.json"),
			Directory: filepath.Join("..", "..", "deploy", "iam", "auditor-express-policy.json"),
			KeyPrefix: iamKeyPrefix,
			Complete:  wholeTestSelected() && !t.Failed(),
		})
	})
	t.Run("contract", func(t *testing.T) {
		t.Parallel()
		setup, _ := teststore.S3Store(t, teststore.Options{})
		cfg := teststore.S3Config(rec.Env())
		cfg.KeyPrefix = iamKeyPrefix
		st, err := s3store.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		storetest.Run(t, storetest.Harness{Store: st, NewBucket: func(t *testing.T) string {
			name := testenv.BucketName("iam")
			teststore.CreateBucket(t, setup, name)
			return name
		}})
	})
	t.Run("doctor", func(t *testing.T) {
		t.Parallel()
		b := teststore.S3(t, teststore.Options{Prefix: "iamdoc", Zones: 2})
		b.S3 = rec.Env()
		url, _ := migratedDB(t)
		cmd := exec.Command(auditorBinary(t), append([]string{"doctor", "--star", "s1", "--database-url", url,
			"--key-prefix", iamKeyPrefix, "--location", b.Zones[0]}, b.Flags()...)...)
		cmd.Env = append(os.Environ(), b.Env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("auditor doctor through the recorder: %v\n%s", err, out)
		}
	})
	return rec
}

// wholeTestSelected reports whether -run and -skip select every subtest of
// the tests they select (no pattern below the top level).
func wholeTestSelected() bool {
	run, skip := flag.Lookup("test.run"), flag.Lookup("test.skip")
	return (run == nil || !strings.Contains(run.Value.String(), "/")) && (skip == nil || skip.Value.String() == "")
}
