package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nova/auditor/bundlefmt"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// TestRunOnceThenVerify settles novasim traffic with `auditor run --once`
// on the file backend, then checks that `auditor verify` passes, and that
// it reports a deleted settled object and a corrupted one, by key.
func TestRunOnceThenVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.FreshDatabase(t)
	root := t.TempDir()
	if code, _, stderr := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	db, err := catalog.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 6, Content: sim.DefaultContent(3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: 8, FlightBytes: 64 << 10,
		FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	common := []string{"--star", "s1", "--database-url", url, "--fs-root", root, "--data-dir", filepath.Join(root, "data")}
	code, stdout, stderr := runCLI(t, append([]string{"run", "--once", "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--log-level", "warn"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "cycle ok") {
		t.Fatalf("run --once: exit %d %q %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, append([]string{"verify"}, common...)...)
	if code != 0 {
		t.Fatalf("verify on a healthy catalog: exit %d %q %q", code, stdout, stderr)
	}

	var keys []string
	streams, _ := db.Streams().StreamsOfStar(ctx, "s1")
	for _, st := range streams {
		entries, _ := db.Streams().EntriesOfStream(ctx, st.ID)
		for _, en := range entries {
			keys = append(keys, bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision)))
		}
	}
	if len(keys) < 2 {
		t.Fatalf("only %d settled objects", len(keys))
	}
	// Scoped and bounded: one stream, read in 1 KiB windows, paced; a
	// sample; and bad input, each naming its flag (exit 2).
	one := streams[0]
	entries, _ := db.Streams().EntriesOfStream(ctx, one.ID)
	code, stdout, stderr = runCLI(t, append([]string{"verify", "--stream", one.ID.String(), "--window", "1KiB", "--rate", "64MiB", "--json"}, common...)...)
	var scoped struct {
		Streams, Objects, Cataloged int
		Findings                    []any
	}
	if err := json.Unmarshal([]byte(stdout), &scoped); code != 0 || err != nil || scoped.Streams != 1 || scoped.Objects != len(entries) ||
		scoped.Cataloged != len(entries) || len(scoped.Findings) != 0 {
		t.Fatalf("verify --stream %s --window 1KiB: exit %d, %+v %v (%d entries) %s", one.ID, code, scoped, err, len(entries), stderr)
	}
	if code, stdout, stderr = runCLI(t, append([]string{"verify", "--sample", "0.5"}, common...)...); code != 0 || !strings.Contains(stdout, "0 findings") {
		t.Fatalf("verify --sample 0.5: exit %d %q %q", code, stdout, stderr)
	}
	for _, bad := range []struct {
		args  []string
		field string
	}{{[]string{"--sample", "0"}, "sample"}, {[]string{"--sample", "1.5"}, "sample"}, {[]string{"--rate", "fast"}, "rate"},
		{[]string{"--window", "0"}, "window"}, {[]string{"--concurrency", "0"}, "concurrency"}, {[]string{"--stream", "zz"}, "stream"},
		{[]string{"--stream", one.ID.String(), "--strays"}, "strays"}} {
		code, stdout, stderr := runCLI(t, append(append([]string{"verify"}, bad.args...), common...)...)
		if code != exitUsage || !strings.Contains(stderr, bad.field) {
			t.Errorf("verify %v: exit %d, want %d naming %s: %q %q", bad.args, code, exitUsage, bad.field, stdout, stderr)
		}
	}
	if err := fs.Delete(ctx, "nova", []string{keys[0]}); err != nil {
		t.Fatal(err)
	}
	p, err := fs.Path("nova", keys[1])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01 // a flipped bit in the first record
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// inspect --key fetches from the store: the flipped object is corrupt
	// (exit 3), an intact one is valid.
	if code, out, errOut := runCLI(t, append([]string{"inspect", "--key", keys[1]}, common[4:6]...)...); code != 3 {
		t.Errorf("inspect --key of the damaged object: exit %d %q %q", code, out, errOut)
	}
	if len(keys) > 2 {
		if code, out, _ := runCLI(t, append([]string{"inspect", "--json", "--key", keys[2]}, common[4:6]...)...); code != 0 || !strings.Contains(out, `"kind": "settled"`) && !strings.Contains(out, `"kind":"settled"`) {
			t.Errorf("inspect --key of an intact object: exit %d %q", code, out)
		}
	}
	code, stdout, _ = runCLI(t, append([]string{"verify"}, common...)...)
	if code != exitFindings {
		t.Fatalf("verify after damage: exit %d, want %d: %s", code, exitFindings, stdout)
	}
	for _, k := range keys[:2] {
		if !strings.Contains(stdout, k) {
			t.Errorf("verify does not name %s:\n%s", k, stdout)
		}
	}
}

// TestEraseApplyThenVerifyAndCheck: an erasure recorded with auditor erase
// over settled records is applied by the cycles (rewrite, reap, apply);
// then auditor verify and novasim's check pass, the object holding
// tombstones exactly there. An applied erasure whose records an object
// still holds (a row doctored to applied) is a verify finding (exit 3,
// class erasure) and a check failure.
func TestEraseApplyThenVerifyAndCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := migratedDBNoStar(t)
	root := t.TempDir()
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 3, Content: sim.DefaultContent(5)}); err != nil {
		t.Fatal(err)
	}
	st := sim.Storage{Store: fs, Standard: "nova"}
	if _, err := sim.Write(ctx, db, st, sim.WriteOptions{Star: "s1", Flights: 6, FlightBytes: 32 << 10, FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	common := []string{"--star", "s1", "--database-url", url, "--fs-root", root, "--data-dir", filepath.Join(root, "data")}
	var runs strings.Builder
	cycle := func() {
		t.Helper()
		code, stdout, stderr := runCLI(t, append([]string{"run", "--once", "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "0s", "--log-level", "warn"}, common...)...)
		if code != 0 {
			t.Fatalf("run --once: exit %d %q %q", code, stdout, stderr)
		}
		runs.WriteString(stdout)
	}
	cycle()
	s := mostSettled(t, db, "s1", 10)
	id := s.ID.String()
	if code, out, errs := runCLI(t, append([]string{"erase", "--stream", id, "--from", "2", "--count", "3"}, common...)...); code != 0 {
		t.Fatalf("erase: %d %q %q", code, out, errs)
	}
	var applied bool
	for i := 0; i < 5 && !applied; i++ {
		cycle()
		es, err := db.Erasures().ErasuresOf(ctx, s.ID, 2, 3)
		if err != nil || len(es) != 1 {
			t.Fatalf("erasures %+v %v", es, err)
		}
		applied = es[0].Applied
	}
	if !applied {
		t.Fatal("the erasure is not applied after 5 cycles")
	}
	if !regexp.MustCompile(`[1-9]\d* records tombstoned, [1-9]\d* objects rewritten`).MatchString(runs.String()) ||
		!strings.Contains(runs.String(), "1 erasures applied") {
		t.Fatalf("the cycles do not report the rewrite and the application:\n%s", runs.String())
	}
	t.Logf("cycles:\n%s", runs.String())
	if code, stdout, stderr := runCLI(t, append([]string{"verify"}, common...)...); code != 0 {
		t.Fatalf("verify after the erasure was applied: exit %d %q %q", code, stdout, stderr)
	}
	rep, err := sim.Check(ctx, db, st, sim.CheckOptions{SettledOnly: true})
	if err != nil || !rep.OK() {
		t.Fatalf("check after the erasure was applied: %v %+v", err, rep.Findings)
	}

	// Doctored: an erasure of live records marked applied.
	if _, err := db.Erasures().RecordErasure(ctx, s.ID, 7, 2); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `UPDATE nova.erasures SET applied_at = now() WHERE stream_id = $1 AND first_record = 7`, s.ID); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCLI(t, append([]string{"verify"}, common...)...)
	if code != exitFindings || !strings.Contains(stdout, "erasure: ") || !strings.Contains(stdout, "2 records of applied erasures") ||
		!strings.Contains(stdout, "the first: record 7 ") {
		t.Fatalf("verify of an applied erasure holding bytes: exit %d\n%s", code, stdout)
	}
	rep, err = sim.Check(ctx, db, st, sim.CheckOptions{SettledOnly: true})
	if err != nil || rep.OK() || rep.Wrong != 2 || !strings.Contains(fmt.Sprint(rep.Findings), "still holds its bytes") {
		t.Fatalf("check of an applied erasure holding bytes: %v wrong %d %+v", err, rep.Wrong, rep.Findings)
	}
}

// mostSettled is the stream of star that has settled the most records,
// which must be at least least.
func mostSettled(t *testing.T, db *catalog.DB, star string, least int64) catalog.Stream {
	t.Helper()
	streams, err := db.Streams().StreamsOfStar(context.Background(), star)
	if err != nil {
		t.Fatal(err)
	}
	var s catalog.Stream
	for _, x := range streams {
		if x.SettledThrough > s.SettledThrough {
			s = x
		}
	}
	if s.SettledThrough < least {
		t.Fatalf("streams %+v: none settled %d records", streams, least)
	}
	return s
}
