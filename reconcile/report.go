package reconcile

import (
	"fmt"
	"io"
	"slices"

	"github.com/nova/auditor/catalog"
)

// ops are the metastore changes one stream's chain asks for.
type ops struct {
	remove     []catalog.EntryRevision
	add        []catalog.Entry
	close      []int64 // publish intents with no upload on keys the chain catalogs or cuts
	reap       []string
	raiseFirst []int64
	raiseRev   []int32
	cut        *object  // the object cut at next_record (its cut is published at apply)
	forgotten  []Range  // records past next_record the store holds
	left       []string // objects past the chain's end: neither cataloged nor reaped
	refs       int      // refs wholly below the new settled_through
}

// diff compares the chain with the stream as the metastore holds it.
func diff(st catalog.Stream, v catalog.ReconcileView, ch chain, byBase map[uint64][]*object) ops {
	var o ops
	next := uint64(st.NextRecord)
	chained := map[string]bool{}
	newEntries := map[catalog.EntryRevision]bool{}
	for _, l := range ch.links {
		switch {
		case l.kept != nil:
			newEntries[catalog.EntryRevision{FirstRecord: l.kept.FirstRecord, Revision: l.kept.Revision}] = true
		case l.cut:
			o.cut = l.obj
		default:
			chained[l.obj.key] = true
			e := l.obj.catalogEntry(st)
			newEntries[catalog.EntryRevision{FirstRecord: e.FirstRecord, Revision: e.Revision}] = true
			o.add = append(o.add, e)
		}
	}
	old := map[catalog.EntryRevision]bool{}
	for _, e := range v.Entries {
		er := catalog.EntryRevision{FirstRecord: e.FirstRecord, Revision: e.Revision}
		old[er] = true
		if !newEntries[er] {
			o.remove = append(o.remove, er)
		}
	}
	o.add = slices.DeleteFunc(o.add, func(e catalog.Entry) bool {
		return old[catalog.EntryRevision{FirstRecord: e.FirstRecord, Revision: e.Revision}]
	})
	reaping := map[string]bool{}
	for _, in := range v.Intents {
		if in.Kind == "reap" {
			reaping[in.ObjectKey] = true
		}
	}
	// The publish intents of what the commit catalogs (and of the object
	// a cut is made from) close with it, unless an upload is recorded
	// there: recovery aborts it and finishes the intent once the key is
	// cataloged.
	for _, in := range v.Intents {
		if in.Kind == "publish" && (chained[in.ObjectKey] || o.cut != nil && in.ObjectKey == o.cut.key) &&
			in.UploadID == "" && len(in.StagedParts) == 0 {
			o.close = append(o.close, in.ID)
		}
	}
	bases := make([]uint64, 0, len(byBase))
	for b := range byBase {
		bases = append(bases, b)
	}
	slices.Sort(bases)
	for _, b := range bases {
		top := int32(-1)
		for _, ob := range byBase[b] {
			top = max(top, int32(ob.revision))
			switch {
			case ob.end > next:
				// Records the write path no longer knows: their numbers
				// will be given to other records. Left as a stray, never
				// cataloged: an operator may salvage it until the sweep's
				// guard (--stray-guard) passes.
				o.forgotten = append(o.forgotten, Range{From: int64(max(ob.first, next)), To: int64(ob.end), Key: ob.key})
			case chained[ob.key] || reaping[ob.key] || old[catalog.EntryRevision{FirstRecord: int64(ob.first), Revision: int32(ob.revision)}]:
			case ob.bad || ob.end > ch.end:
				// Unsound, or it may hold the only copy of records the
				// chain does not reach (a chain cut short by an unsound
				// object, or by bytes the slots disagree with): never
				// armed.
				o.left = append(o.left, ob.key)
			default:
				o.reap = append(o.reap, ob.key)
			}
		}
		if h, ok := v.High[int64(b)]; !ok || h < top {
			o.raiseFirst, o.raiseRev = append(o.raiseFirst, int64(b)), append(o.raiseRev, top)
		}
	}
	// Every old entry the chain drops is superseded: its key is reaped
	// too (a missing one costs the reap a DELETE of nothing).
	for _, er := range o.remove {
		key := entryKeyOf(st, catalog.Entry{Epoch: st.Epoch, FirstRecord: er.FirstRecord, Revision: er.Revision})
		if !reaping[key] && !slices.Contains(o.reap, key) {
			o.reap = append(o.reap, key)
		}
	}
	for _, r := range v.Refs {
		if uint64(r.EndRecord()) <= ch.end {
			o.refs++
		}
	}
	return o
}

// Range is a range of records [From, To) of a stream, with why (or where).
type Range struct {
	From int64  `json:"from"`
	To   int64  `json:"to"`
	Key  string `json:"key,omitempty"`
	Why  string `json:"why,omitempty"`
}

// Problem is an object reconcile could not use, and why.
type Problem struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// CutReport is an object cut at the stream's next_record.
type CutReport struct {
	From      string `json:"from,omitempty"`      // the object cut
	At        int64  `json:"at,omitempty"`        // the record it is cut at (next_record)
	Published string `json:"published,omitempty"` // the cut's key, once applied
}

// StreamReport is what reconcile found, and changes, of one stream.
type StreamReport struct {
	Stream         string    `json:"stream"`
	SettledBefore  int64     `json:"settled_before"`
	SettledAfter   int64     `json:"settled_after"`
	NextRecord     int64     `json:"next_record"`
	ObjectsListed  int       `json:"objects_listed"`
	ObjectsRead    int       `json:"objects_read"` // read whole to check their bytes
	BytesRead      int64     `json:"bytes_read"`
	EntriesRemoved int       `json:"entries_removed"`
	EntriesAdded   int       `json:"entries_added"`
	RefsReleased   int       `json:"refs_released"`
	ReapsArmed     int       `json:"reaps_armed"`
	BasesRaised    int       `json:"bases_raised"`
	IntentsClosed  int       `json:"intents_closed"`
	Cut            CutReport `json:"cut"`
	// Lost are records the metastore knows live (at or above the stream's
	// low_record) that nothing holds: a catalog entry whose object is
	// gone, or a ref whose slot is gone past the chain's end.
	Lost []Range `json:"lost,omitempty"`
	// Retired are records below the stream's low_record, which the
	// metastore itself says are dead, whose objects or slots are gone:
	// retention's work (its trim or reap ran after the metastore's
	// state was taken), not a loss. Only the low_record the metastore
	// holds excuses a record: after a restore, retention that ran later
	// raised a low_record the metastore no longer knows, and the records
	// between the two are reported lost.
	Retired []Range `json:"retired,omitempty"`
	// Forgotten are records past next_record that objects hold: the
	// metastore forgot them; they are not cataloged.
	Forgotten []Range `json:"forgotten,omitempty"`
	// Differ are records past settled_through the store's objects hold
	// other bytes for than the slots the refs name (the write path gave
	// the numbers again since the restore): the refs keep them.
	Differ []Range `json:"differ,omitempty"`
	// Left are objects neither cataloged nor reaped: they hold records at
	// or past the chain's end that nothing else may hold (strays until the
	// sweep's guard).
	Left    []string   `json:"left,omitempty"`
	Unsound []Problem  `json:"unsound,omitempty"` // objects whose footer or bytes do not check
	Foreign []string   `json:"foreign,omitempty"` // keys under the prefix that are not this stream's settled keys
	Changes int64      `json:"changes"`
	Entries []EntryRow `json:"entries,omitempty"` // the catalog it leaves (or would)
}

// EntryRow is one catalog entry of a report.
type EntryRow struct {
	First    int64 `json:"first"`
	End      int64 `json:"end"`
	Revision int32 `json:"revision"`
	Cut      bool  `json:"cut,omitempty"`
	Kept     bool  `json:"kept,omitempty"` // the metastore's entry, no object to replace it
}

func (sr *StreamReport) fill(st catalog.Stream, ch chain, o ops) {
	sr.SettledAfter = int64(ch.end)
	sr.EntriesRemoved, sr.EntriesAdded = len(o.remove), len(o.add)
	sr.RefsReleased, sr.ReapsArmed, sr.BasesRaised, sr.IntentsClosed = o.refs, len(o.reap), len(o.raiseFirst), len(o.close)
	sr.Forgotten = append(sr.Forgotten, o.forgotten...)
	sr.Left = append(sr.Left, o.left...)
	if o.cut != nil {
		sr.Cut = CutReport{From: o.cut.key, At: int64(ch.end)}
		sr.EntriesAdded++
	}
	if ch.lostLead != nil {
		sr.gone(st, int64(ch.lostLead.from), int64(ch.lostLead.to),
			"the catalog named objects the store no longer holds, and nothing else holds them: dropped from the catalog")
	}
	for _, s := range ch.lostKept {
		sr.gone(st, int64(s.from), int64(s.to), "the catalog names an object the store no longer holds; the entry is kept")
	}
	for _, l := range ch.links {
		switch {
		case l.kept != nil:
			sr.Entries = append(sr.Entries, EntryRow{First: l.kept.FirstRecord, End: l.kept.EndRecord(), Revision: l.kept.Revision, Kept: true})
		case l.cut:
			sr.Entries = append(sr.Entries, EntryRow{First: int64(l.obj.first), End: int64(ch.end), Cut: true})
		default:
			sr.Entries = append(sr.Entries, EntryRow{First: int64(l.obj.first), End: int64(l.obj.end), Revision: int32(l.obj.revision)})
		}
	}
	sr.Changes = int64(len(o.remove) + len(o.add) + o.refs + len(o.reap) + len(o.raiseFirst) + len(o.close))
	if o.cut != nil {
		sr.Changes++
	}
	if sr.SettledAfter != st.SettledThrough {
		sr.Changes++
	}
}

// gone reports records [from, to) of st that nothing holds, and why: the
// part below the stream's low_record is retired (dead by retention, as
// the metastore says), the rest lost. An empty part is not reported.
func (sr *StreamReport) gone(st catalog.Stream, from, to int64, why string) {
	low := max(st.LowRecord, 0)
	if r := min(to, low); from < r {
		sr.Retired = append(sr.Retired, Range{From: from, To: r, Why: why})
	}
	if f := max(from, low); f < to {
		sr.Lost = append(sr.Lost, Range{From: f, To: to, Why: why})
	}
}

// Report is what one reconcile found and changed (or would, in a dry run).
type Report struct {
	Star          string         `json:"star"`
	Apply         bool           `json:"apply"`
	Streams       []StreamReport `json:"streams"`
	Changes       int64          `json:"changes"` // metastore changes made (or, in a dry run, to make)
	ObjectsListed int            `json:"objects_listed"`
	ObjectsRead   int            `json:"objects_read"`
	BytesRead     int64          `json:"bytes_read"`
	LostRecords   int64          `json:"lost_records"`
	// RetiredRecords are the records of the streams' Retired: below
	// their low_record, not a loss.
	RetiredRecords int64   `json:"retired_records"`
	Forgotten      int64   `json:"forgotten_records"`
	Unsound        int     `json:"unsound_objects"`
	MarkersFound   int64   `json:"markers_found"` // the highest marker number the store holds
	Mark           int64   `json:"mark"`          // the star's mark after (or, in a dry run, as it would be)
	HaltLifted     bool    `json:"halt_lifted"`
	Seconds        float64 `json:"seconds"`
}

func (r *Report) add(s StreamReport) {
	r.Streams = append(r.Streams, s)
	r.Changes += s.Changes
	r.ObjectsListed += s.ObjectsListed
	r.ObjectsRead += s.ObjectsRead
	r.BytesRead += s.BytesRead
	r.Unsound += len(s.Unsound)
	for _, l := range s.Lost {
		r.LostRecords += l.To - l.From
	}
	for _, l := range s.Retired {
		r.RetiredRecords += l.To - l.From
	}
	for _, f := range s.Forgotten {
		r.Forgotten += f.To - f.From
	}
}

// Findings reports whether records are lost or objects unsound: `auditor
// reconcile` exits 3 on them. Retired records are not findings.
func (r Report) Findings() bool { return r.LostRecords > 0 || r.Unsound > 0 }

// Print writes the report for people: a line per stream that changes (or
// has something to say), then the totals.
func (r Report) Print(w io.Writer) {
	verb := "would change"
	if r.Apply {
		verb = "changed"
	}
	for _, s := range r.Streams {
		if s.Changes == 0 && len(s.Lost) == 0 && len(s.Retired) == 0 && len(s.Forgotten) == 0 && len(s.Unsound) == 0 && len(s.Foreign) == 0 {
			continue
		}
		fmt.Fprintf(w, "stream %s: settled_through %d -> %d (next_record %d); entries -%d +%d, refs released %d, reaps armed %d, bases raised %d\n",
			s.Stream, s.SettledBefore, s.SettledAfter, s.NextRecord, s.EntriesRemoved, s.EntriesAdded, s.RefsReleased, s.ReapsArmed, s.BasesRaised)
		if s.Cut.From != "" {
			fmt.Fprintf(w, "  cut %s at record %d %s\n", s.Cut.From, s.Cut.At, s.Cut.Published)
		}
		for _, l := range s.Lost {
			fmt.Fprintf(w, "  LOST records [%d, %d): %s\n", l.From, l.To, l.Why)
		}
		for _, l := range s.Retired {
			fmt.Fprintf(w, "  retired records [%d, %d): below low_record, dead by retention (not a loss): %s\n", l.From, l.To, l.Why)
		}
		for _, f := range s.Forgotten {
			fmt.Fprintf(w, "  forgotten records [%d, %d) in %s: past next_record, not cataloged (a stray: salvage it before --stray-guard passes)\n", f.From, f.To, f.Key)
		}
		for _, p := range s.Unsound {
			fmt.Fprintf(w, "  unsound %s: %s\n", p.Key, p.Error)
		}
		for _, k := range s.Foreign {
			fmt.Fprintf(w, "  foreign key %s\n", k)
		}
	}
	fmt.Fprintf(w, "star %s: %d streams, %d objects listed, %d read whole (%d bytes); %s %d; %d records lost, %d retired (below low_record), %d forgotten, %d unsound objects; mark %d (store's highest marker %d)",
		r.Star, len(r.Streams), r.ObjectsListed, r.ObjectsRead, r.BytesRead, verb, r.Changes, r.LostRecords, r.RetiredRecords, r.Forgotten, r.Unsound, r.Mark, r.MarkersFound)
	if r.HaltLifted {
		fmt.Fprint(w, "; the metastore_rewound halt is lifted")
	}
	fmt.Fprintf(w, " (%.1fs)\n", r.Seconds)
}
