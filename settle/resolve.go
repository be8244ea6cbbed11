package settle

import (
	"context"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Resolved is one window of a stream's unsettled data: its chunks in
// record order.
type Resolved struct {
	Chunks []SourceChunk
	Bytes  int64 // Σ chunk bytes
	// Complete: the chunks reach the stream's next_record (this is the
	// last window of the stream's backlog).
	Complete bool
}

// resolver walks a stream's refs window by window: each window's chunks
// must start where the previous window's ended, and the last must end at
// the next_record of the stream snapshot, so a backlog of any length is
// checked and planned in pieces of bounded size.
type resolver struct {
	rd      *bundle.Reader // the cycle's, over the footer cache
	star    string
	st      catalog.Stream
	at      int64 // the next record the chunks must start at
	started bool  // a live chunk was found already
}

func newResolver(rd *bundle.Reader, star string, st catalog.Stream) *resolver {
	return &resolver{rd: rd, star: star, st: st, at: st.SettledThrough}
}

// window reads the refs' slots and returns the chunks that continue the
// stream from r.at, skipping chunks wholly below settled_through (already
// settled) or below low_record (dead). It stops before a ref once the
// window holds maxRecords records (a window holds at least one ref), and
// more says the refs given may not be all that remain below next_record.
// Any break is a *cycle.QuarantineError naming the slot and the error class.
func (r *resolver) window(ctx context.Context, refs []catalog.SpanRef, maxRecords int64, more bool) (Resolved, error) {
	var out Resolved
	stream := r.st.ID
	var records int64
	for n, ref := range refs {
		if ref.EndRecord() <= r.at {
			continue // wholly settled; deleted by the next commit
		}
		if records >= maxRecords && len(out.Chunks) > 0 {
			more = more || n < len(refs)
			break
		}
		if err := r.addRef(ctx, ref, &out, &records); err != nil {
			return out, err
		}
	}
	switch {
	case r.at == r.st.NextRecord:
		out.Complete = true
	case r.at > r.st.NextRecord || !more:
		return out, &cycle.QuarantineError{Class: cycle.ClassTiling,
			Err: fmt.Errorf("stream %s: chunks end at %d, next_record is %d", stream, r.at, r.st.NextRecord)}
	}
	return out, nil
}

// addRef adds to out the live chunks of one ref's slots, in record order, and
// counts their records into records; it moves r.at past the ref. Its
// chunks must tile the ref exactly and the live ones continue the stream
// from r.at, else a *cycle.QuarantineError (class tiling).
func (r *resolver) addRef(ctx context.Context, ref catalog.SpanRef, out *Resolved, records *int64) error {
	stream := r.st.ID
	rec := uint64(ref.FirstRecord)
	for _, s := range ref.Slots {
		key, e, err := r.chunkAt(ctx, ref, s, rec)
		if err != nil {
			return err
		}
		rec = e.EndRecord()
		end := int64(e.EndRecord())
		if end <= r.at || end <= r.st.LowRecord {
			continue // settled already, or dead
		}
		// A live chunk starts where the last one ended, or, for the first
		// live chunk after dead ones, above settled_through but not above
		// low_record (the catalog then starts above a gap: retention).
		first := int64(e.FirstRecord)
		if first != r.at && !(first > r.at && !r.started && first <= r.st.LowRecord) {
			return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
				Err: fmt.Errorf("chunk [%d, %d) does not start at record %d", e.FirstRecord, e.EndRecord(), r.at)}
		}
		out.Chunks = append(out.Chunks, SourceChunk{Src: Source{Key: key, Class: ref.Class}, Entry: e})
		out.Bytes += int64(e.ChunkBytes())
		*records += int64(e.Count())
		r.at, r.started = end, true
	}
	if rec != uint64(ref.EndRecord()) {
		return &cycle.QuarantineError{Class: cycle.ClassTiling,
			Err: fmt.Errorf("ref [%d, %d) of stream %s: its chunks end at %d", ref.FirstRecord, ref.EndRecord(), stream, rec)}
	}
	if ref.EndRecord() > r.at {
		r.at = ref.EndRecord() // its chunks were dead: the stream continues past them
	}
	return nil
}

// chunkAt reads the footer of the ref's slot s and returns the slot's key
// and the stream's chunk there, which must start at record rec (the ref's
// chunks follow one another slot by slot); a slot that disagrees is a
// *cycle.QuarantineError naming it.
func (r *resolver) chunkAt(ctx context.Context, ref catalog.SpanRef, s catalog.SlotRef, rec uint64) (string, bundlefmt.Entry, error) {
	stream := r.st.ID
	key := bundlefmt.SlotKey(r.star, uint64(s.Epoch), uint64(s.Seq))
	f, err := r.rd.SlotFooter(ctx, ref.Class, key, s.FooterOffset, s.FooterLength)
	if err != nil {
		return key, bundlefmt.Entry{}, err
	}
	i, ok := f.Find(stream, rec)
	if !ok {
		return key, bundlefmt.Entry{}, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
			Err: fmt.Errorf("stream %s has no chunk at record %d", stream, rec)}
	}
	e, err := f.Entry(i)
	if err != nil {
		return key, e, bundle.Classify(key, err)
	}
	if e.Stream != stream || e.FirstRecord != rec {
		return key, e, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
			Err: fmt.Errorf("chunk [%d, %d) where the ref expects record %d", e.FirstRecord, e.EndRecord(), rec)}
	}
	return key, e, nil
}
