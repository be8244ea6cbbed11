package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/sim"
)

// TestRunOnceHoldsErasuresOnAVersionedBucket: on a versitygw bucket with
// versioning enabled, `run --once` settles, rewrites the objects an
// erasure names and reaps the old revisions as ever, but the reap's DELETE
// leaves the old revision as a noncurrent version, so the erasure is
// never marked applied, and the cycle says why.
func TestRunOnceHoldsErasuresOnAVersionedBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3e := testenv.StartVersitygw(t, "--versioning-dir", t.TempDir())
	st, err := s3store.New(ctx, teststore.S3Config(s3e))
	if err != nil {
		t.Fatal(err)
	}
	bucket := testenv.BucketName("versioned")
	teststore.CreateBucket(t, st, bucket)
	if _, err := st.Client().PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &bucket,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	db, url := testenv.MigratedDB(t)
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 2, Content: sim.DefaultContent(5)}); err != nil {
		t.Fatal(err)
	}
	storage := sim.Storage{Store: st, Standard: bucket}
	if _, err := sim.Write(ctx, db, storage, sim.WriteOptions{Star: "s1", Flights: 4, FlightBytes: 32 << 10, FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	bin := auditorBinary(t)
	args := []string{"run", "--once", "--star", "s1", "--database-url", url, "--s3-endpoint", s3e.Endpoint, "--s3-path-style",
		"--bucket", bucket, "--data-dir", filepath.Join(t.TempDir(), "data"), "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "0s",
		"--log-level", "warn", "--log-format", "json"}
	var runs strings.Builder
	cycle := func() {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3e.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3e.SecretKey, "AWS_REGION="+s3e.Region)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run --once: %v\n%s", err, out)
		}
		runs.Write(out)
	}
	cycle()
	s := mostSettled(t, db, "s1", 6)
	if _, err := db.Erasures().RecordErasure(ctx, s.ID, 2, 3); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		cycle()
	}
	es, err := db.Erasures().ErasuresOf(ctx, s.ID, 2, 3)
	if err != nil || len(es) != 1 {
		t.Fatalf("erasures %+v %v", es, err)
	}
	out := runs.String()
	if es[0].Applied || !strings.Contains(out, "0 erasures applied") || strings.Contains(out, " 1 erasures applied") {
		t.Fatalf("the erasure was marked applied on a versioned bucket: %+v\n%s", es[0], out)
	}
	if !strings.Contains(out, "1 objects rewritten") || !strings.Contains(out, "erasures not marked applied") ||
		!strings.Contains(out, "bucket "+bucket+": versioning enabled: a DELETE leaves the bytes") {
		t.Fatalf("the cycles do not show the rewrite, or do not say why the erasure waits:\n%s", out)
	}
	// What the hold is for: the old revision the reap deleted is still
	// there, behind a delete marker.
	vs, err := st.Client().ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &bucket, Prefix: aws.String("buckets/")})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, v := range vs.Versions {
		if v.IsLatest != nil && !*v.IsLatest {
			kept++
		}
	}
	if kept == 0 || len(vs.DeleteMarkers) == 0 {
		t.Fatalf("no noncurrent version behind a delete marker (%d versions, %d markers): the test shows nothing", len(vs.Versions), len(vs.DeleteMarkers))
	}
}
