package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// run runs novasim in-process with the given environment.
func run(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }, signals: make(chan os.Signal)}
	code := dispatch(context.Background(), e, args)
	return code, out.String(), errb.String()
}

func TestSetupWriteCheckFileBackend(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	vars := map[string]string{
		"NOVA_AUDITOR_DATABASE_URL":       testenv.FreshDatabase(t),
		"NOVA_AUDITOR_FS_ROOT":            root,
		"NOVA_AUDITOR_S3_EXPRESS_BUCKETS": "za=nova-za,zb=nova-zb",
		"NOVA_AUDITOR_LOCATION":           "zb",
		"NOVA_AUDITOR_LOG_FORMAT":         "json",
	}
	if code, _, stderr := run(t, vars, "setup", "--star", "cli"); code != 2 || !strings.Contains(stderr, "--migrate") {
		t.Fatalf("setup on an unmigrated database: exit %d, %s", code, stderr)
	}
	code, out, stderr := run(t, vars, "setup", "--migrate", "--star", "cli", "--streams", "20", "--express-share", "0.5",
		"--seed", "5", "--record-bytes", "0-2KiB", "--stream-buckets", "b0,b1")
	if code != 0 || !strings.Contains(out, "star cli-x: express, 10 streams") {
		t.Fatalf("setup: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = run(t, vars, "write", "--flights", "80", "--flight-bytes", "8KiB", "--progress", "none",
		"--fail-lost", "0.05", "--fail-crash", "0.02", "--fail-failover", "0.02", "--fail-lost-reply", "0.05")
	if code != 0 || !strings.Contains(out, "star cli: 80 flights") || !strings.Contains(out, "star cli-x: 80 flights") {
		t.Fatalf("write: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = run(t, vars, "check")
	if code != 0 || !strings.HasSuffix(out, "OK\n") {
		t.Fatalf("check: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = run(t, vars, "check", "--json", "--star", "cli-x")
	if code != 0 || !strings.Contains(out, `"Stars": 1`) {
		t.Fatalf("check --json: exit %d\n%s", code, out)
	}

	// A flipped byte in a slot is a finding: exit 1. The express star's slots
	// live in both express buckets, never in the standard one.
	if _, err := os.Stat(filepath.Join(root, "nova", "stars", "cli-x")); !os.IsNotExist(err) {
		t.Fatalf("express slots in the standard bucket: %v", err)
	}
	// Damage an absorbed slot's copy in the bucket reads do not prefer, so
	// only the comparison of copies can see it.
	ctx := context.Background()
	db, err := catalog.Open(ctx, vars["NOVA_AUDITOR_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "cli-x")
	if err != nil {
		t.Fatal(err)
	}
	var named catalog.SlotRef
	for _, s := range streams {
		if refs, err := writepath.New(db).RefsOfStream(ctx, s.ID); err == nil && len(refs) > 0 {
			named = refs[0].Slots[0]
			break
		}
	}
	db.Close()
	slot := filepath.Join(root, "nova-za", bundlefmt.SlotKey("cli-x", uint64(named.Epoch), uint64(named.Seq)))
	b, err := os.ReadFile(slot)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 1
	if err := os.WriteFile(slot, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, vars, "check")
	if code != 1 || !strings.Contains(out, "copies differ") {
		t.Fatalf("check of a damaged slot: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"NOVA_AUDITOR_DATABASE_URL": "postgres://u:pw@127.0.0.1:1/x", "NOVA_AUDITOR_FS_ROOT": t.TempDir()}
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"write", "--flights", "x"},
		{"write", "--takeover", "sometimes"},
		{"write", "--slot-checksum", "md5"},
		{"write", "--fail-lost", "1.5"},
		{"setup", "--record-bytes", "9-3"},
		{"setup", "--star", "Bad_Name"},
		{"check", "extra"},
	} {
		if code, _, stderr := run(t, vars, args...); code != 2 || strings.Contains(stderr, "pw@") {
			t.Errorf("novasim %v: exit %d (want 2): %s", args, code, stderr)
		}
	}
	// A database that does not answer is not a configuration error: 5,
	// saying it could not be reached.
	if code, _, stderr := run(t, vars, "setup", "--star", "ok"); code != cli.ExitUnreachable ||
		!strings.Contains(stderr, "could not be reached") || strings.Contains(stderr, "pw@") {
		t.Errorf("novasim setup against a closed port: exit %d (want %d): %s", code, cli.ExitUnreachable, stderr)
	}
	if code, _, _ := run(t, vars, "write", "-h"); code != 0 {
		t.Errorf("write -h: exit %d", code)
	}
}

// TestWriteSlotChecksumOnS3: --slot-checksum chooses the algorithm slots
// are stored with on S3 (here CRC-32, which versitygw can copy from with a
// server-checked CRC-32C).
func TestWriteSlotChecksumOnS3(t *testing.T) {
	env := testenv.S3(t)
	ctx := context.Background()
	bucket := testenv.BucketName("nsim")
	st, _ := teststore.S3Store(t, teststore.Options{})
	teststore.CreateBucket(t, st, bucket)
	vars := map[string]string{
		"NOVA_AUDITOR_DATABASE_URL":  testenv.FreshDatabase(t),
		"NOVA_AUDITOR_S3_ENDPOINT":   env.Endpoint,
		"NOVA_AUDITOR_S3_PATH_STYLE": "true",
		"NOVA_AUDITOR_BUCKET":        bucket,
	}
	// the SDK's default chain reads the process environment
	t.Setenv("AWS_ACCESS_KEY_ID", env.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", env.SecretKey)
	if code, out, stderr := run(t, vars, "setup", "--migrate", "--star", "cks", "--streams", "3"); code != 0 {
		t.Fatalf("setup: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, out, stderr := run(t, vars, "write", "--flights", "3", "--progress", "none", "--slot-checksum", "crc32"); code != 0 {
		t.Fatalf("write: exit %d\n%s\n%s", code, out, stderr)
	}
	var slots []string
	if err := st.List(ctx, bucket, "stars/", func(o objstore.ObjectInfo) error { slots = append(slots, o.Key); return nil }); err != nil || len(slots) == 0 {
		t.Fatalf("no slots written: %v", err)
	}
	for _, k := range slots {
		h, err := st.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &k, ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatal(err)
		}
		if h.ChecksumCRC32 == nil || h.ChecksumCRC32C != nil {
			t.Fatalf("slot %s stored with crc32 %v, crc32c %v; want CRC-32 only", k, aws.ToString(h.ChecksumCRC32), aws.ToString(h.ChecksumCRC32C))
		}
	}
}

// TestHelpPlaceholders: every novasim command's help shows each flag's
// value with the placeholder the auditor's help uses (N, SIZE, MODE), not
// pflag's type name (int, uint, string), and a boolean as a plain --name.
func TestHelpPlaceholders(t *testing.T) {
	t.Parallel()
	typeName := regexp.MustCompile(`\n +(-[a-z], )?--[a-z0-9-]+ (string|int|int64|uint|uint64|float|float64|duration|strings)\b|\[=`)
	for _, c := range []string{"check", "erase", "setup", "write"} {
		code, out, _ := run(t, nil, c, "-h")
		if code != 0 || typeName.MatchString(out) {
			t.Errorf("novasim %s -h: exit %d, shows %q:\n%s", c, code, typeName.FindString(out), out)
		}
	}
}
