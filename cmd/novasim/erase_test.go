package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
)

// TestEraseAndEraseRate: write --erase-rate records erasures while
// writing; erase records one range (again: a no-op) or random ones; check
// passes with all of them pending. Bad input exits 2 and records nothing.
func TestEraseAndEraseRate(t *testing.T) {
	t.Parallel()
	url := testenv.FreshDatabase(t)
	vars := map[string]string{"NOVA_AUDITOR_DATABASE_URL": url, "NOVA_AUDITOR_FS_ROOT": t.TempDir()}
	if code, out, errs := run(t, vars, "setup", "--migrate", "--star", "e1", "--streams", "4"); code != 0 {
		t.Fatalf("setup: %d %s %s", code, out, errs)
	}
	if code, out, errs := run(t, vars, "setup", "--star", "e2", "--streams", "1"); code != 0 {
		t.Fatalf("setup e2: %d %s %s", code, out, errs)
	}
	code, out, errs := run(t, vars, "write", "--star", "e1", "--flights", "30", "--flight-bytes", "8KiB", "--progress", "none", "--erase-rate", "0.5")
	if code != 0 || !strings.Contains(out, "erasures of") || strings.Contains(out, " 0 erasures of") {
		t.Fatalf("write --erase-rate: %d\n%s\n%s", code, out, errs)
	}
	ctx := context.Background()
	db, err := catalog.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	streams, err := db.Streams().StreamsOfStar(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	s := streams[0]
	for _, x := range streams {
		if x.NextRecord > s.NextRecord {
			s = x
		}
	}
	others, err := db.Streams().StreamsOfStar(ctx, "e2")
	if err != nil || len(others) != 1 {
		t.Fatal(others, err)
	}
	before, err := db.Streams().ErasuresOfStar(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%x", s.ID[:]) // 32 hex digits: --stream takes them as it takes the uuid form
	// A record near the end no write-time erasure starts at.
	starts := map[int64]bool{}
	for _, e := range before[s.ID] {
		starts[e.FirstRecord] = true
	}
	first := s.NextRecord - 3
	for starts[first] {
		first--
	}
	r := fmt.Sprint(first)
	for i := 0; i < 2; i++ {
		code, out, errs = run(t, vars, "erase", "--star", "e1", "--stream", id, "--from", r, "--count", "1")
		if code != 0 || !strings.Contains(out, "1 erasures recorded") || !strings.Contains(out, "pending") {
			t.Fatalf("erase (%d): %d %s %s", i, code, out, errs)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stream", id, "--from", "0"}, "go together"},
		{[]string{}, "--random N"},
		{[]string{"--stream", id, "--from", "0", "--count", "1", "--random", "3"}, "not both"},
		{[]string{"--random", "0"}, "must be positive"},
		{[]string{"--random", "2", "--max-records", "0"}, "max-records"},
		{[]string{"--stream", "xyz", "--from", "0", "--count", "1"}, "stream"},
		{[]string{"--stream", id, "--from", "0", "--count", "0"}, "record_count 0 is not positive"},
		{[]string{"--stream", id, "--from", "-2", "--count", "1"}, "first_record -2 is negative"},
		{[]string{"--stream", id, "--from", fmt.Sprint(s.NextRecord - 1), "--count", "2"}, "do not exist yet"},
		{[]string{"--stream", others[0].ID.String(), "--from", "0", "--count", "1"}, `is in star "e2", not "e1"`},
		{[]string{"--stream", catalog.StreamID{3: 3}.String(), "--from", "0", "--count", "1"}, "no stream"},
		{[]string{"--stream", id, "--from", r, "--count", "2"}, "already has an erasure"},
	} {
		code, out, errs := run(t, vars, append([]string{"erase", "--star", "e1"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("erase %v: exit %d %q %q (want 2 naming %q)", tc.args, code, out, errs, tc.want)
		}
	}
	after, err := db.Streams().ErasuresOfStar(ctx, "e1")
	if err != nil || len(after[s.ID]) != len(before[s.ID])+1 {
		t.Fatalf("erasures of the stream: %d before, %d after the refusals (want one more) %v", len(before[s.ID]), len(after[s.ID]), err)
	}
	code, out, errs = run(t, vars, "erase", "--star", "e1", "--random", "10", "--seed", "3", "--json")
	if code != 0 || !strings.Contains(out, `"Recorded"`) {
		t.Fatalf("erase --random: %d %s %s", code, out, errs)
	}
	if code, out, _ := run(t, vars, "check", "--star", "e1"); code != 0 || !strings.HasSuffix(out, "OK\n") {
		t.Fatalf("check with the erasures pending: %d\n%s", code, out)
	}
}
