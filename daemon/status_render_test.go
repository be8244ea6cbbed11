package daemon_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/objstore"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/status_*.{txt,json} from the statuses built in the tests")

// statusNow is the database clock of the constructed statuses.
var statusNow = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

func ago(d time.Duration) time.Time   { return statusNow.Add(-d) }
func agoP(d time.Duration) *time.Time { t := ago(d); return &t }

// busyStatus has every section of the status filled, and every branch of
// the text that a filled section can take: a live leader, a pause, a halt,
// a blocked reason, the leader's policy, bucket warnings, a due stream,
// a fence wait and a quarantine hold that bounds trim, a quarantined
// stream and slot, erasures past their alert bound held by a bucket with
// more pending than listed, pending requests, a running, a dry and a
// failed run.
func busyStatus() daemon.Status {
	return daemon.Status{
		Star: "s1", Now: statusNow,
		Leader: daemon.LeaderStatus{Live: true, Holder: "auditor-0", Token: 42, ExpiresAt: agoP(-10 * time.Second)},
		Paused: true, PausedAt: agoP(2 * time.Hour),
		Halted: true, HaltedReason: "trim: chain broken at 3/17\nsecond line", HaltedAt: agoP(90 * time.Minute),
		SettleLag: 25*3600 - 300,
		Classes: []daemon.ClassStatus{
			{Class: catalog.ClassStandard, Linger: 300, AgeCap: 86400, Streams: 3, Due: 1, OverAgeCap: 1, OldestSince: agoP(25 * time.Hour),
				OldestAge: 90000, AgeCapHeadroom: -3600, SettleLag: 89700,
				Deferred: 12, DeferredBytes: 3 << 20, DeferredDeadline: agoP(-7 * time.Hour), DeferredDueAt: agoP(-time.Hour)},
			{Class: catalog.ClassExpress, Linger: 5, AgeCap: 3600, Streams: 0, AgeCapHeadroom: 3600},
		},
		DueTotal: 7,
		DueStreams: []daemon.DueStatus{{Stream: "00000000-0000-0000-0000-000000000001", Class: catalog.ClassStandard,
			Since: ago(25 * time.Hour), Deadline: ago(time.Hour)}},
		Trim: daemon.TrimStatus{CursorEpoch: 1, CursorSeq: 3, BoundEpoch: 1, BoundSeq: 9, HeadEpoch: 2, HeadSeq: 4, Releasable: 6,
			FenceWait:      &daemon.FenceWaitStatus{Epoch: 1, Since: ago(47 * time.Second)},
			QuarantineHold: &daemon.HoldStatus{Epoch: 1, Seq: 9, Stream: "00000000-0000-0000-0000-000000000002", Record: 12, Streams: 2, Bounding: true}},
		Backlog: daemon.BacklogStatus{PublishIntents: 2, OldestPublish: agoP(1500 * time.Millisecond), ReapIntents: 1,
			ObjectsDue: 3, ObjectsWaiting: 4, SlotsDue: 5, SlotsWaiting: 6},
		Quarantine: []daemon.QuarantineStatus{
			{Stream: "00000000-0000-0000-0000-000000000002", ErrorClass: "checksum", Reason: "slot 1/9: bad DataCRC", Since: ago(3 * time.Hour)},
			{SlotKey: "s1/00000001/00000000000000000011", ErrorClass: "format", Reason: "bad magic\nat offset 0", Since: ago(26 * time.Hour)},
		},
		Erasures: daemon.ErasureStatus{Pending: 3, Quarantined: 1, OldestRequestedAt: agoP(50 * time.Hour), OldestAge: 180000, AlertAfter: 172800,
			Oldest: []daemon.PendingErasureStatus{
				{Stream: "00000000-0000-0000-0000-000000000002", FirstRecord: 10, RecordCount: 5, RequestedAt: ago(50 * time.Hour),
					Age: 180000, Quarantined: true, WaitingFor: daemon.ErasureWaitsRelease},
				{Stream: "00000000-0000-0000-0000-000000000003", FirstRecord: 0, RecordCount: 1, RequestedAt: ago(time.Hour),
					Age: 3600, WaitingFor: daemon.ErasureWaitsBucket},
			},
			TransitWindow: 100000, TransitBound: 86400 + 3600 + 120, AppliedInTransitWindow: 4,
			HeldBy: "bucket b4 (versioning enabled)"},
		PendingRequests: []daemon.RequestStatus{
			{ID: 7, Kind: catalog.AdminTrigger, Stream: "00000000-0000-0000-0000-000000000001", RequestedBy: "ops@host", RequestedAt: ago(5 * time.Minute),
				Attempts: 2, LastError: "settle: " + string(bytes.Repeat([]byte("x"), 100))},
			{ID: 8, Kind: catalog.AdminPause, RequestedBy: "ops@host", RequestedAt: ago(time.Minute)},
		},
		LastSuccess: &daemon.RunStatus{ID: 40, Holder: "auditor-0", Token: 42, Trigger: "schedule", StartedAt: ago(31 * time.Minute),
			EndedAt: agoP(30 * time.Minute), Duration: 60, Outcome: catalog.RunOK,
			Counts: catalog.RunCounts{StreamsSettled: 3, ObjectsPublished: 4, ObjectsAdopted: 1, BytesCopied: 5 << 20, BytesFetched: 1000,
				SlotsReaped: 2, ObjectsReaped: 1}},
		LastRuns: []daemon.RunStatus{
			{ID: 42, Holder: "auditor-0", Token: 42, Trigger: "schedule", StartedAt: ago(10 * time.Second), Duration: 10},
			{ID: 41, Holder: "auditor-0", Token: 42, Trigger: "admin", DryRun: true, StartedAt: ago(20 * time.Minute),
				EndedAt: agoP(20*time.Minute - 250*time.Millisecond), Duration: 0.25, Outcome: catalog.RunOK},
			{ID: 39, Holder: "auditor-0", Token: 41, Trigger: "schedule", StartedAt: ago(2 * time.Hour), EndedAt: agoP(2*time.Hour - 3*time.Second),
				Duration: 3, Outcome: "failed", Counts: catalog.RunCounts{BytesCopied: 3 << 40}, Error: "settle stream 1: boom\ndetail"},
		},
		Policy: daemon.PolicyStatus{Source: "leader", Holder: "auditor-0", Version: "v1.2.3", RecordedAt: agoP(30 * time.Second),
			Linger: 300, AgeCap: 86400, ExpressLinger: 5, ExpressAgeCap: 3600, ReapGrace: 3600, TailGrowth: 1, CopyFloor: 5 << 20},
		Blocked: "the database schema is newer than this binary",
		Buckets: []daemon.BucketStatus{
			{RulesVerdict: objstore.RulesVerdict{Bucket: "b1", Expiring: []objstore.LifecycleRule{{ID: "old", Enabled: true, Prefix: "",
				Expiration: true, ExpirationDays: 30}}, AbortIncomplete: objstore.VerdictNo, Encryption: objstore.VerdictNo,
				Versioning: objstore.VersioningOff, ObjectLock: objstore.VerdictNo}, CheckedAt: ago(time.Hour)},
			{RulesVerdict: objstore.RulesVerdict{Bucket: "b2", Expiring: []objstore.LifecycleRule{}, AbortIncomplete: objstore.VerdictUnknown,
				Encryption: objstore.VerdictUnknown, Note: "lifecycle: 501 NotImplemented"}, CheckedAt: ago(time.Hour)},
			{RulesVerdict: objstore.RulesVerdict{Bucket: "b3", Expiring: []objstore.LifecycleRule{}, AbortIncomplete: objstore.VerdictYes,
				Encryption: objstore.VerdictYes, Versioning: objstore.VersioningOff, ObjectLock: objstore.VerdictNo}, CheckedAt: ago(time.Hour)},
			{RulesVerdict: objstore.RulesVerdict{Bucket: "b4", Expiring: []objstore.LifecycleRule{}, AbortIncomplete: objstore.VerdictYes,
				Encryption: objstore.VerdictYes, Versioning: objstore.VersioningEnabled, ObjectLock: objstore.VerdictNo}, CheckedAt: ago(time.Hour)},
		},
	}
}

// freshStatus is a star no daemon has led: the empty lists BuildStatus
// starts from, the command's own policy, nothing pending.
func freshStatus() daemon.Status {
	return daemon.Status{Star: "s1", Now: statusNow, Classes: []daemon.ClassStatus{}, DueStreams: []daemon.DueStatus{},
		Quarantine: []daemon.QuarantineStatus{}, PendingRequests: []daemon.RequestStatus{}, LastRuns: []daemon.RunStatus{},
		Buckets:  []daemon.BucketStatus{},
		Erasures: daemon.ErasureStatus{Oldest: []daemon.PendingErasureStatus{}, TransitWindow: 90120, TransitBound: 90120},
		Policy: daemon.PolicyStatus{Source: "flags", Linger: 300, AgeCap: 86400, ExpressLinger: 5, ExpressAgeCap: 3600,
			ReapGrace: 3600}}
}

// lapsedStatus has a leader whose lease expired, a trim that could not
// decide, pending erasures within their bound and all listed, and a
// transit window held open past its bound.
func lapsedStatus() daemon.Status {
	s := freshStatus()
	s.Leader = daemon.LeaderStatus{Holder: "auditor-1", Token: 9, ExpiresAt: agoP(3 * time.Minute)}
	s.Paused = true // no PausedAt: recorded by an older binary
	s.Halted, s.HaltedReason = true, "lease lost"
	s.Trim.Error = "trim view: chain of s1 has a gap at 1/4\nmore"
	s.Erasures = daemon.ErasureStatus{Pending: 1, OldestRequestedAt: agoP(time.Minute), OldestAge: 60, AlertAfter: 172800,
		Oldest: []daemon.PendingErasureStatus{{Stream: "00000000-0000-0000-0000-000000000004", FirstRecord: 3, RecordCount: 2,
			RequestedAt: ago(time.Minute), Age: 60, WaitingFor: daemon.ErasureWaitsSettle}},
		TransitWindow: 200000, TransitBound: 90120, AppliedInTransitWindow: 1}
	s.LastSuccess = &daemon.RunStatus{ID: 1, Outcome: catalog.RunOK, StartedAt: ago(time.Hour)} // no EndedAt: printed as none
	return s
}

// TestStatusRendering: the text and the JSON of constructed statuses, byte
// for byte against testdata (go test ./daemon -run TestStatusRendering
// -rewrite to rewrite them after an intended change). No database: the
// rendering is a function of the Status value alone.
func TestStatusRendering(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    daemon.Status
	}{{"busy", busyStatus()}, {"fresh", freshStatus()}, {"lapsed", lapsedStatus()}} {
		t.Run(tc.name, func(t *testing.T) { renderRoundTrip(t, "status_"+tc.name, tc.s) })
	}
}

// rendered is a status that prints as text and as JSON.
type rendered interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
}

// renderRoundTrip holds s's text and JSON to testdata/name.txt and
// name.json, and the text of the JSON read back into a T to the text.
func renderRoundTrip[T rendered](t *testing.T, name string, s T) {
	t.Helper()
	var text, js bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatalf("write text: %v", err)
	}
	if err := s.WriteJSON(&js); err != nil {
		t.Fatalf("write json: %v", err)
	}
	golden(t, name+".txt", text.Bytes())
	golden(t, name+".json", js.Bytes())
	back := new(T)
	if err := json.Unmarshal(js.Bytes(), back); err != nil {
		t.Fatalf("the JSON does not read back: %v", err)
	}
	var again bytes.Buffer
	if err := (*back).WriteText(&again); err != nil {
		t.Fatalf("write text of the JSON read back: %v", err)
	}
	if again.String() != text.String() {
		t.Errorf("the text read back from the JSON differs:\n%s\nwant:\n%s", again.String(), text.String())
	}
}

// golden compares got with testdata/name, or writes it there with -rewrite.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (go test -run TestStatusRendering -rewrite writes it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
