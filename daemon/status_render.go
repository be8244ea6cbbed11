package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nova/auditor/objstore"
)

// Rendering of a Status: the text of `auditor status` and the JSON of
// `auditor status --json` and /status. Everything here is a function of
// the Status value alone (BuildStatus reads it), so the output can be
// tested on a constructed value, without a database.

// WriteJSON writes the status as indented JSON: the document `auditor
// status --json` prints and /status serves.
func (s Status) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("encode the status of star %s: %w", s.Star, err)
	}
	return nil
}

// WriteText prints the status as tables for a person.
func (s Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	ago := func(t time.Time) string { return dur(s.Now.Sub(t)) + " ago" }
	s.writeLeadership(p, ts, ago)
	s.writeBuckets(p)
	s.writeSettle(p, ts, ago)
	s.writeTrim(p, ago)
	s.writeErasures(p, ago)
	s.writeRequests(p, ago)
	s.writeRuns(p, ago)
	return tw.Flush()
}

// writeLeadership prints the star, its leader, its state (paused, halted,
// blocked) and the policy in force.
func (s Status) writeLeadership(p func(string, ...any), ts, ago func(time.Time) string) {
	p("star\t%s\t(database clock %s)\n", s.Star, ts(s.Now))
	switch {
	case s.Leader.Live:
		p("leader\t%s\ttoken %d, lease until %s\n", s.Leader.Holder, s.Leader.Token, ts(*s.Leader.ExpiresAt))
	case s.Leader.Holder != "":
		p("leader\tnone\t(last: %s, token %d, expired %s)\n", s.Leader.Holder, s.Leader.Token, ago(*s.Leader.ExpiresAt))
	default:
		p("leader\tnone\t(never taken)\n")
	}
	state := "running"
	if s.Paused {
		state = "PAUSED"
		if s.PausedAt != nil {
			state += " since " + ts(*s.PausedAt)
		}
	}
	p("state\t%s\n", state)
	if s.Halted {
		since := ""
		if s.HaltedAt != nil {
			since = " since " + ts(*s.HaltedAt)
		}
		p("HALTED\t%s%s\t(auditor resume clears it)\n", oneLine(s.HaltedReason), since)
	}
	if s.Blocked != "" {
		p("NO WORK\t%s\t(clears itself when the cause is gone)\n", oneLine(s.Blocked))
	}
	pol := s.Policy
	from := "this command's flags: no daemon has recorded one"
	if pol.Source == "leader" {
		from = "the daemon " + pol.Holder
		if pol.RecordedAt != nil {
			from += ", recorded " + ago(*pol.RecordedAt)
		}
	}
	p("policy\tlinger %s, age cap %s; express linger %s, age cap %s; reap grace %s\t(from %s)\n",
		dur(secs(pol.Linger)), dur(secs(pol.AgeCap)), dur(secs(pol.ExpressLinger)), dur(secs(pol.ExpressAgeCap)),
		dur(secs(pol.ReapGrace)), from)
	if pol.TailGrowth > 0 {
		cohorts := "no cohorts"
		if pol.Cohorts > 1 {
			cohorts = fmt.Sprintf("%d cohorts", pol.Cohorts)
		}
		p("tail growth\t%g, copy floor %s, %s\t(from %s)\n", pol.TailGrowth, bytesIEC(pol.CopyFloor), cohorts, from)
	} else {
		p("tail growth\toff: every stream is due at its linger\t(from %s)\n", from)
	}
}

// writeBuckets prints each bucket's rules as the auditor checked them.
func (s Status) writeBuckets(p func(string, ...any)) {
	for _, b := range s.Buckets {
		for _, r := range b.Expiring {
			p("bucket %s\tEXPIRATION %s: no work while it is there\n", b.Bucket, r)
		}
		if b.AbortIncomplete == objstore.VerdictNo {
			p("bucket %s\twarning: no AbortIncompleteMultipartUpload rule over the auditor's keys\n", b.Bucket)
		}
		if b.Encryption == objstore.VerdictNo {
			p("bucket %s\twarning: no default server-side encryption\n", b.Bucket)
		}
		switch b.KeepsDeleted() {
		case objstore.VerdictYes:
			p("bucket %s\tKEEPS DELETED BYTES (%s): no erasure is marked applied while it does\n", b.Bucket, b.KeepsDeletedWhy())
		case objstore.VerdictUnknown:
			p("bucket %s\tversioning unknown: erasures are marked applied without knowing that a DELETE removes the bytes\n", b.Bucket)
		}
		if b.AbortIncomplete == objstore.VerdictUnknown || b.Encryption == objstore.VerdictUnknown || b.KeepsDeleted() == objstore.VerdictUnknown {
			p("bucket %s\trules unknown (lifecycle %s, encryption %s, versioning %s, object lock %s): %s\n", b.Bucket,
				b.AbortIncomplete, b.Encryption, orUnknown(b.Versioning), orUnknown(b.ObjectLock), b.Note)
		}
		if len(b.Expiring) == 0 && b.AbortIncomplete == objstore.VerdictYes && b.Encryption == objstore.VerdictYes &&
			b.KeepsDeleted() == objstore.VerdictNo {
			p("bucket %s\tok: no expiration, incomplete uploads aborted, encrypted by default, unversioned\n", b.Bucket)
		}
	}
}

// orUnknown is a verdict's state, "unknown" when it has none (recorded by
// a binary that did not check it).
func orUnknown(v string) string {
	if v == "" {
		return objstore.VerdictUnknown
	}
	return v
}

// writeSettle prints the settle lag, the last success, the classes and the
// due streams.
func (s Status) writeSettle(p func(string, ...any), ts, ago func(time.Time) string) {
	p("settle lag\t%s\n", dur(secs(s.SettleLag)))
	if s.LastSuccess != nil && s.LastSuccess.EndedAt != nil {
		p("last success\trun %d, %s\n", s.LastSuccess.ID, ago(*s.LastSuccess.EndedAt))
	} else {
		p("last success\tnone\n")
	}
	p("\nCLASS\tSTREAMS\tDUE\tOLDEST AGE\tAGE CAP\tHEADROOM\tOVER CAP\tSETTLE LAG\n")
	for _, c := range s.Classes {
		p("%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n", c.Class, c.Streams, c.Due, dur(secs(c.OldestAge)), dur(secs(c.AgeCap)),
			dur(secs(c.AgeCapHeadroom)), c.OverAgeCap, dur(secs(c.SettleLag)))
	}
	sep := "\n" // a line of its own: the class table keeps its columns
	for _, c := range s.Classes {
		if c.Deferred == 0 || c.DeferredDeadline == nil || c.DeferredDueAt == nil {
			continue
		}
		p(sep)
		sep = ""
		p("deferred %s	%d streams wait for tail growth or their cohort's turn, holding about %s in transit; the first due %s, its age cap %s\n",
			c.Class, c.Deferred, bytesIEC(c.DeferredBytes), when(s.Now, *c.DeferredDueAt), when(s.Now, *c.DeferredDeadline))
	}
	if len(s.DueStreams) > 0 {
		p("\nDUE STREAM (%d due)\tCLASS\tWAITING\tDEADLINE\n", s.DueTotal)
		for _, d := range s.DueStreams {
			p("%s\t%s\t%s\t%s\n", d.Stream, d.Class, dur(s.Now.Sub(d.Since)), ts(d.Deadline))
		}
	}
}

// writeTrim prints trim's cursor and what holds it, the open publishes, the
// reap backlog and the quarantined streams.
func (s Status) writeTrim(p func(string, ...any), ago func(time.Time) string) {
	t := s.Trim
	if t.Error != "" {
		p("\ntrim\tERROR %s\n", oneLine(t.Error))
	} else {
		p("\ntrim cursor\t%d/%d, bound %d/%d (%d slots to release), absorbed head %d/%d\n",
			t.CursorEpoch, t.CursorSeq, t.BoundEpoch, t.BoundSeq, t.Releasable, t.HeadEpoch, t.HeadSeq)
	}
	if w := t.FenceWait; w != nil {
		p("fence in progress\tepoch %d, for %s (trim waits)\n", w.Epoch, dur(s.Now.Sub(w.Since)))
	}
	if h := t.QuarantineHold; h != nil {
		held := ""
		if h.Bounding {
			held = " (TRIM IS HELD BY QUARANTINE)"
		}
		p("quarantine holds\tslot %d/%d for stream %s@%d, %d streams%s\n", h.Epoch, h.Seq, h.Stream, h.Record, h.Streams, held)
	}
	b := s.Backlog
	oldest := ""
	if b.OldestPublish != nil {
		oldest = ", oldest " + ago(*b.OldestPublish)
	}
	p("open publishes\t%d%s\n", b.PublishIntents, oldest)
	p("reap backlog\t%d slots and %d objects past grace, %d slots and %d objects waiting\n",
		b.SlotsDue, b.ObjectsDue, b.SlotsWaiting, b.ObjectsWaiting)
	if len(s.Quarantine) == 0 {
		p("quarantine\tnone\n")
	} else {
		p("\nQUARANTINED (%d)\tCLASS\tSINCE\tREASON\n", len(s.Quarantine))
		for _, q := range s.Quarantine {
			what := q.Stream
			if q.SlotKey != "" {
				what = strings.TrimSpace(what + " " + q.SlotKey)
			}
			p("%s\t%s\t%s\t%s\n", what, q.ErrorClass, ago(q.Since), oneLine(q.Reason))
		}
	}
}

// writeErasures prints the pending erasures: the summary line, and the
// oldest ones with what each waits for.
func (s Status) writeErasures(p func(string, ...any), ago func(time.Time) string) {
	e := s.Erasures
	bound := ""
	if e.AlertAfter > 0 {
		bound = fmt.Sprintf(" (alert after %s)", dur(secs(e.AlertAfter)))
	}
	held := func() {
		if e.HeldBy != "" {
			p("erasures HELD\tnone is marked applied while %s keeps what a DELETE removes\n", e.HeldBy)
		}
	}
	transit := func() {
		held := ""
		if e.TransitWindow > e.TransitBound {
			held = fmt.Sprintf("; now %s: transit data that old is still referenced, by a quarantine or past the age cap", dur(secs(e.TransitWindow)))
		}
		p("erasures in transit\t%d applied in the last %s may still have copies in transit slots until trim reaps them "+
			"(at most age cap + reap grace + two cycles after the slot's absorb: %s%s)\n",
			e.AppliedInTransitWindow, dur(secs(e.TransitWindow)), dur(secs(e.TransitBound)), held)
	}
	if e.Pending == 0 {
		p("\nerasures\tnone pending%s\n", bound)
		held()
		transit()
		return
	}
	late := ""
	if e.AlertAfter > 0 && e.OldestAge > e.AlertAfter {
		late = " PAST THE ALERT BOUND"
	}
	p("\nerasures\t%d pending, %d on quarantined streams; oldest %s%s%s\n", e.Pending, e.Quarantined, dur(secs(e.OldestAge)), bound, late)
	held()
	transit()
	p("\nPENDING ERASURE (%d)\tRECORDS\tREQUESTED\tWAITING FOR\n", e.Pending)
	for _, r := range e.Oldest {
		p("%s\t[%d, %d)\t%s\t%s\n", r.Stream, r.FirstRecord, r.FirstRecord+r.RecordCount, ago(r.RequestedAt), erasureWaitText(r.WaitingFor))
	}
	if n := e.Pending - int64(len(e.Oldest)); n > 0 {
		p("... and %d more\t\t\t\n", n)
	}
}

func erasureWaitText(w string) string {
	switch w {
	case ErasureWaitsMalformed:
		return "nothing: a malformed row is never applied (correct or delete it)"
	case ErasureWaitsRelease:
		return "release: the stream is quarantined (auditor release --stream)"
	case ErasureWaitsWrite:
		return "write: records past next_record do not exist yet"
	case ErasureWaitsSettle:
		return "settle: records still in transit (settle writes them as tombstones)"
	case ErasureWaitsBucket:
		return "bucket: a bucket keeps what a DELETE removes (versioning, Object Lock)"
	}
	return "rewrite: the erasure step rewrites its objects, or the reap grace of the old revisions"
}

// writeRequests prints the admin requests not yet consumed.
func (s Status) writeRequests(p func(string, ...any), ago func(time.Time) string) {
	if len(s.PendingRequests) > 0 {
		p("\nPENDING REQUEST\tKIND\tSTREAM\tBY\tREQUESTED\tATTEMPTS\tLAST ERROR\n")
		for _, r := range s.PendingRequests {
			p("%d\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Kind, r.Stream, r.RequestedBy, ago(r.RequestedAt), r.Attempts,
				clip(oneLine(r.LastError), 80))
		}
	}
}

// writeRuns prints the last runs.
func (s Status) writeRuns(p func(string, ...any), ago func(time.Time) string) {
	if len(s.LastRuns) > 0 {
		p("\nRUN\tTRIGGER\tSTARTED\tDURATION\tOUTCOME\tSETTLED\tPUBLISHED\tADOPTED\tCOPIED\tFETCHED\tREAPED\tERROR\n")
		for _, r := range s.LastRuns {
			out := r.Outcome
			if out == "" {
				out = "running"
			}
			if r.DryRun {
				out += " (dry run)"
			}
			c := r.Counts
			p("%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\n", r.ID, r.Trigger, ago(r.StartedAt), dur(secs(r.Duration)), out,
				c.StreamsSettled, c.ObjectsPublished, c.ObjectsAdopted, bytesIEC(c.BytesCopied), bytesIEC(c.BytesFetched),
				c.SlotsReaped+c.ObjectsReaped, clip(oneLine(r.Error), 80))
		}
	}
}

// dur rounds a duration for people.
func dur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Hour:
		s = d.Round(time.Second).String()
	default:
		s = d.Round(time.Minute).String()
		s = strings.TrimSuffix(s, "0s")
	}
	if neg {
		return "-" + s
	}
	return s
}

// when says when t is, from now: "in 5m0s (2025-...)" or "5m0s ago (...)".
func when(now, t time.Time) string {
	if d := t.Sub(now); d >= 0 {
		return "in " + dur(d) + " (" + t.UTC().Format(time.RFC3339) + ")"
	}
	return dur(now.Sub(t)) + " ago (" + t.UTC().Format(time.RFC3339) + ")"
}

func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
