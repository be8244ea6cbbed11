package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
)

func TestReleaseAndStatus(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	ctx := context.Background()
	id := catalog.StreamID{0: 0x12, 15: 0x34}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, l.Fence, id, "stars/s1/chain/00000000000000000001/00000000000000000000", "checksum", "DataCRC mismatch"); err != nil {
		t.Fatal(err)
	}
	args := []string{"--star", "s1", "--database-url", url}

	code, out, errs := runCLI(t, append([]string{"status", "--json"}, args...)...)
	var st daemon.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status --json: %d %v %q", code, err, errs)
	}
	want := id.String()
	if len(st.Quarantine) != 1 || st.Quarantine[0].Stream != want || st.Quarantine[0].Reason != "DataCRC mismatch" ||
		!st.Leader.Live || st.Leader.Holder != "t" || len(st.Classes) != 2 {
		t.Fatalf("status %s", out)
	}
	code, out, _ = runCLI(t, append([]string{"status"}, args...)...)
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "QUARANTINED (1)") {
		t.Fatalf("status: %d\n%s", code, out)
	}

	if code, _, errs := runCLI(t, append([]string{"release"}, args...)...); code != 2 || !strings.Contains(errs, "stream") {
		t.Fatalf("release without --stream: %d %q", code, errs)
	}
	if code, out, errs := runCLI(t, append([]string{"release", "--stream", want}, args...)...); code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, append([]string{"release", "--stream", want}, args...)...); code != 1 || !strings.Contains(errs, "not quarantined") {
		t.Fatalf("second release: %d %q", code, errs)
	}
	reqs, err := db.Requests().AdminRequests(ctx, "s1", true, 10)
	if err != nil || len(reqs) != 1 || reqs[0].Kind != "release" || reqs[0].Stream == nil || *reqs[0].Stream != id || !strings.Contains(reqs[0].RequestedBy, "@") {
		t.Fatalf("requests %+v %v", reqs, err)
	}
	code, out, _ = runCLI(t, append([]string{"status"}, args...)...)
	if code != 0 || !strings.Contains(out, "quarantine") || strings.Contains(out, "QUARANTINED") || !strings.Contains(out, "PENDING REQUEST") {
		t.Fatalf("status after release:\n%s", out)
	}

	// resume says when it cleared a halt.
	if err := db.Ledger().SetHalted(ctx, l.Fence, "overlap in stream 9"); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(t, append([]string{"resume"}, args...)...); code != 0 || !strings.Contains(out, "cleared the halt: overlap in stream 9") {
		t.Fatalf("resume: %d %q", code, out)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		objects, stream, streams int
		want                     string
	}{
		{0, 0, 4, "verify [>         ] stream 0/4, 0 objects"},
		{7, 2, 4, "verify [=====>    ] stream 2/4, 7 objects"},
		{9, 4, 4, "verify [==========] stream 4/4, 9 objects"},
		{0, 0, 0, "verify [==========] stream 0/0, 0 objects"},
	} {
		if got := progressBar(tc.objects, tc.stream, tc.streams, 10); got != tc.want {
			t.Errorf("progressBar(%d, %d, %d) = %q, want %q", tc.objects, tc.stream, tc.streams, got, tc.want)
		}
	}
}
