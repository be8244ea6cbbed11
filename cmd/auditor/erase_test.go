package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// absorbRecords gives stream id of star s1 n records (one flight at seq),
// so its next_record is n: nothing settles them, the command only reads
// the stream row.
func absorbRecords(t *testing.T, db *catalog.DB, id catalog.StreamID, seq, first, n int64) {
	t.Helper()
	if err := writepath.New(db).Absorb(context.Background(), "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: seq, FooterOffset: 100, FooterLength: 50,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: first, Count: n}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestEraseRecordsAndRefusesBadInput: auditor erase records an erasure
// (again: a no-op), and refuses with exit 2 and a clear message, recording
// nothing, an unknown stream, a stream of another star, a malformed or
// missing flag, an empty or negative range, a range past next_record and
// another range at the same first record. A quarantined stream's erasure
// is recorded with a warning.
func TestEraseRecordsAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	ctx := context.Background()
	id := catalog.StreamID{0: 0xe1, 15: 0x01}
	other := catalog.StreamID{0: 0xe1, 15: 0x02}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStar(ctx, "s2", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStream(ctx, other, "s2", "b1"); err != nil {
		t.Fatal(err)
	}
	absorbRecords(t, db, id, 0, 0, 100)
	sid := id.String()
	args := []string{"--star", "s1", "--database-url", url}
	erase := func(extra ...string) (int, string, string) {
		return runCLI(t, append(append([]string{"erase"}, extra...), args...)...)
	}

	code, out, errs := erase("--stream", sid, "--from", "10", "--count", "5")
	if code != 0 || !strings.Contains(out, "[10, 15)") || !strings.Contains(out, "recorded") ||
		!strings.Contains(out, "next cycle") || errs != "" {
		t.Fatalf("erase: %d %q %q", code, out, errs)
	}
	// Again: the same row, said so, exit 0.
	code, out, errs = erase("--stream", sid, "--from", "10", "--count", "5", "--json")
	var rep ErasureReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("erase again --json: %d %v %q %q", code, err, out, errs)
	}
	if !rep.Already || rep.State != "pending" || rep.Stream != sid || rep.FirstRecord != 10 || rep.RecordCount != 5 ||
		rep.EndRecord != 15 || rep.Star != "s1" || rep.Quarantined || len(rep.Warnings) != 0 || rep.RequestedAt.IsZero() {
		t.Fatalf("erase again: %+v", rep)
	}
	// The whole stream is fine: [0, next_record).
	if code, out, errs := erase("--stream", sid, "--from", "0", "--count", "100"); code != 0 {
		t.Fatalf("erase [0, 100): %d %q %q", code, out, errs)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no stream", []string{"--from", "1", "--count", "1"}, "stream: is required"},
		{"no from", []string{"--stream", sid, "--count", "1"}, "from: is required"},
		{"no count", []string{"--stream", sid, "--from", "1"}, "count: is required"},
		{"malformed stream", []string{"--stream", "not-a-uuid", "--from", "1", "--count", "1"}, "stream:"},
		{"malformed from", []string{"--stream", sid, "--from", "ten", "--count", "1"}, "invalid argument \"ten\" for \"--from\""},
		{"malformed count", []string{"--stream", sid, "--from", "1", "--count", "1.5"}, "invalid argument \"1.5\" for \"--count\""},
		{"unknown stream", []string{"--stream", catalog.StreamID{1: 9}.String(), "--from", "1", "--count", "1"}, "no stream"},
		{"stream of another star", []string{"--stream", other.String(), "--from", "1", "--count", "1"}, `is in star "s2", not "s1"`},
		{"empty range", []string{"--stream", sid, "--from", "1", "--count", "0"}, "record_count 0 is not positive"},
		{"negative count", []string{"--stream", sid, "--from", "1", "--count", "-3"}, "record_count -3 is not positive"},
		{"negative from", []string{"--stream", sid, "--from", "-1", "--count", "1"}, "from: not an erasure: first_record -1 is negative"},
		{"overflow", []string{"--stream", sid, "--from", "9223372036854775800", "--count", "100"}, "overflows"},
		{"past next_record", []string{"--stream", sid, "--from", "95", "--count", "6"}, "do not exist yet"},
		{"wholly past next_record", []string{"--stream", sid, "--from", "100", "--count", "1"}, "next_record 100"},
		{"another range at the same first record", []string{"--stream", sid, "--from", "10", "--count", "7"}, "already has an erasure at record 10 of 5 records"},
		{"unexpected argument", []string{"--stream", sid, "--from", "1", "--count", "1", "extra"}, "unexpected argument"},
	} {
		code, out, errs := erase(tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q (want exit 2 naming %q)", tc.name, code, out, errs, tc.want)
		}
	}
	got, err := db.Erasures().ErasuresOf(ctx, id, 0, 1<<62)
	if err != nil || len(got) != 2 || got[0].FirstRecord != 0 || got[0].RecordCount != 100 || got[1].FirstRecord != 10 || got[1].RecordCount != 5 {
		t.Fatalf("erasures after the refusals: %+v %v (want only [0,100) and [10,15))", got, err)
	}
	if got, err := db.Erasures().ErasuresOf(ctx, other, 0, 1<<62); err != nil || len(got) != 0 {
		t.Fatalf("the other star's stream has erasures: %+v %v", got, err)
	}

	// A quarantined stream: recorded, with a warning naming the release.
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, l.Fence, id, "", "checksum", "DataCRC mismatch"); err != nil {
		t.Fatal(err)
	}
	code, out, errs = erase("--stream", sid, "--from", "20", "--count", "2", "--json")
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("erase of a quarantined stream: %d %v %q %q", code, err, out, errs)
	}
	if !rep.Quarantined || len(rep.Warnings) != 1 || !strings.Contains(errs, "quarantined") ||
		!strings.Contains(errs, "auditor release --stream "+sid) || rep.Already {
		t.Fatalf("erase of a quarantined stream: %+v %q", rep, errs)
	}
	if got, err := db.Erasures().ErasuresOf(ctx, id, 20, 21); err != nil || len(got) != 2 || got[1].FirstRecord != 20 || got[1].RecordCount != 2 {
		t.Fatalf("the quarantined stream's erasure was not recorded: %+v %v", got, err)
	}
}

// TestEraseDryRunAndWait: erase --dry-run over settled records lists the
// catalog entries holding them (key, revision, record range, the records
// erased in each) and records nothing; erase --wait with no cycle running
// records the erasure and exits 7 past --timeout; with cycles running it
// returns 0 once applied_at is set, the JSON saying applied. A dry run of
// the applied erasure has nothing to rewrite.
func TestEraseDryRunAndWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db, _, root := writtenFileStar(t, 2, 6, 6)
	common := []string{"--star", "s1", "--database-url", url, "--fs-root", root, "--data-dir", filepath.Join(root, "data")}
	runArgs := append([]string{"run", "--once", "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "0s",
		"--log-level", "warn"}, common...)
	if code, out, errs := runCLI(t, runArgs...); code != 0 {
		t.Fatalf("run --once: %d %q %q", code, out, errs)
	}
	s := mostSettled(t, db, "s1", 10)
	id := s.ID.String()
	erase := func(extra ...string) (int, string, string) {
		return runCLI(t, append(append([]string{"erase", "--stream", id, "--from", "2", "--count", "3"}, extra...), common...)...)
	}

	code, out, errs := erase("--dry-run", "--json")
	var plan ErasureReport
	if err := json.Unmarshal([]byte(out), &plan); code != 0 || err != nil {
		t.Fatalf("erase --dry-run --json: %d %v %q %q", code, err, out, errs)
	}
	entries, err := db.Erasures().EntriesIntersecting(ctx, s.ID, s.Epoch, 2, 5)
	if err != nil || len(entries) == 0 {
		t.Fatalf("entries holding [2, 5): %+v %v", entries, err)
	}
	if !plan.DryRun || plan.State != "not_recorded" || plan.EndRecord != 5 || plan.Unsettled != nil || len(plan.Rewrites) != len(entries) {
		t.Fatalf("erase --dry-run: %+v (entries %+v)", plan, entries)
	}
	for i, w := range plan.Rewrites {
		en := entries[i]
		if w.Key != bundle.EntryKey(s.Bucket, en) || w.Revision != en.Revision || w.FirstRecord != en.FirstRecord ||
			w.RecordCount != en.RecordCount || w.Bucket != s.Bucket || w.Class != en.Class ||
			w.Erased.From != max(2, en.FirstRecord) || w.Erased.To != min(5, en.EndRecord()) {
			t.Fatalf("rewrite %d: %+v, entry %+v", i, w, en)
		}
	}
	code, out, _ = erase("--dry-run")
	if code != 0 || !strings.Contains(out, "not recorded") || !strings.Contains(out, plan.Rewrites[0].Key) {
		t.Fatalf("erase --dry-run: %d %q", code, out)
	}
	if got, err := db.Erasures().ErasuresOf(ctx, s.ID, 0, 1<<62); err != nil || len(got) != 0 {
		t.Fatalf("a dry run recorded erasures: %+v %v", got, err)
	}
	if code, _, errs := erase("--dry-run", "--wait"); code != exitUsage || !strings.Contains(errs, "wait") {
		t.Fatalf("erase --dry-run --wait: %d %q", code, errs)
	}

	// No cycle runs: recorded, and the wait runs out.
	code, out, errs = erase("--wait", "--timeout", "1s")
	if code != exitTimeout || !strings.Contains(out, "recorded") || !strings.Contains(errs, "not applied within 1s") {
		t.Fatalf("erase --wait with no cycle: %d %q %q", code, out, errs)
	}

	// Cycles run: the wait ends once applied_at is set.
	stop := make(chan struct{})
	cycles := make(chan string, 1)
	go func() {
		var failed string
		defer func() { cycles <- failed }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if code, out, errs := runCLI(t, runArgs...); code != 0 && failed == "" {
				failed = fmt.Sprintf("run --once: %d %q %q", code, out, errs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	code, out, errs = erase("--wait", "--timeout", "60s", "--json")
	close(stop)
	if failed := <-cycles; failed != "" {
		t.Fatal(failed)
	}
	var rep ErasureReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.State != "applied" || rep.AppliedAt == nil || !rep.Already {
		t.Fatalf("erase --wait: %d %v %+v %q", code, err, rep, errs)
	}
	if got, err := db.Erasures().ErasuresOf(ctx, s.ID, 2, 3); err != nil || len(got) != 1 || !got[0].Applied {
		t.Fatalf("erasure after the wait: %+v %v", got, err)
	}
	code, out, _ = erase("--dry-run", "--json")
	var again ErasureReport
	if err := json.Unmarshal([]byte(out), &again); code != 0 || err != nil || again.State != "applied" || len(again.Rewrites) != 0 {
		t.Fatalf("erase --dry-run of an applied erasure: %d %v %+v", code, err, again)
	}
}
