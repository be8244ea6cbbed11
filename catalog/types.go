package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotFound is returned when a requested row does not exist.
var ErrNotFound = errors.New("not found")

// The chain classes (nova.stars.chain_class): where a star's slots live
// and how soon its streams are due. Which buckets hold each class is
// objstore.StarTopology's; how soon, DuePolicy's.
const (
	ClassStandard = "standard"
	ClassExpress  = "express"
)

// Classes lists every chain class.
func Classes() []string { return []string{ClassStandard, ClassExpress} }

// Star is a row of nova.stars.
type Star struct {
	Star        string
	ChainClass  string
	Epoch       int64 // current writer epoch
	NextSeq     int64 // (Epoch, NextSeq) is the absorbed head
	FenceWindow int
}

// StarEpoch is a row of nova.star_epochs.
type StarEpoch struct {
	Epoch     int64
	StartedAt time.Time
	EndSeq    *int64 // nil: current epoch, or a fence in progress
}

// Stream is a row of nova.streams.
type Stream struct {
	ID             StreamID
	Star           string
	Bucket         string
	Epoch          int64
	Class          string
	NextRecord     int64
	LowRecord      int64
	SettledThrough int64
}

// SlotRef is one entry of a span ref: a slot and its footer window.
type SlotRef struct {
	Epoch        int64
	Seq          int64
	FooterOffset int64
	FooterLength int64
}

// SpanRef is a row of nova.span_refs.
type SpanRef struct {
	Stream      StreamID
	FirstRecord int64
	RecordCount int64
	Star        string
	Class       string
	Slots       []SlotRef
	AbsorbedAt  time.Time
}

// EndRecord is one past the ref's last record.
func (r SpanRef) EndRecord() int64 { return r.FirstRecord + r.RecordCount }

// DueMarker is a row of nova.due_markers.
type DueMarker struct {
	Stream StreamID
	Class  string
	Since  time.Time
}

// Entry is a row of nova.catalog: one settled object.
type Entry struct {
	Stream       StreamID
	Epoch        int64
	FirstRecord  int64
	Revision     int32
	RecordCount  int64
	ObjectBytes  int64
	FooterOffset int64
	FooterLength int64
	MinTimestamp int64
	MaxTimestamp int64
	Class        string
	SettledAt    time.Time
}

// EndRecord is one past the entry's last record.
func (e Entry) EndRecord() int64 { return e.FirstRecord + e.RecordCount }

// Star reads one star.
func (ss *Streams) Star(ctx context.Context, star string) (Star, error) {
	var s Star
	err := ss.db.reader(ctx).QueryRow(ctx, `SELECT star, chain_class, epoch, next_seq, fence_window FROM nova.stars WHERE star = $1`, star).
		Scan(&s.Star, &s.ChainClass, &s.Epoch, &s.NextSeq, &s.FenceWindow)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("star %q: %w", star, ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("read star %q: %w", star, err)
	}
	return s, nil
}

// StarEpochs reads a star's epochs in order.
func (ss *Streams) StarEpochs(ctx context.Context, star string) ([]StarEpoch, error) {
	return starEpochs(ctx, ss.db.pool, star)
}

const streamCols = `stream_id, star, bucket, epoch, class, next_record, low_record, settled_through`

func scanStream(r pgx.Row) (Stream, error) {
	var s Stream
	err := r.Scan(&s.ID, &s.Star, &s.Bucket, &s.Epoch, &s.Class, &s.NextRecord, &s.LowRecord, &s.SettledThrough)
	return s, err
}

// Stream reads one stream.
func (ss *Streams) Stream(ctx context.Context, id StreamID) (Stream, error) {
	s, err := scanStream(ss.db.reader(ctx).QueryRow(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE stream_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("stream %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("read stream %s: %w", id, err)
	}
	return s, nil
}

// StreamsOfStar lists a star's streams in stream ID order.
func (ss *Streams) StreamsOfStar(ctx context.Context, star string) ([]Stream, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE star = $1 ORDER BY stream_id`, star)
	if err != nil {
		return nil, fmt.Errorf("list streams of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stream, error) { return scanStream(r) })
	if err != nil {
		return nil, fmt.Errorf("list streams of star %q: %w", star, err)
	}
	return out, nil
}

// SpanRefColumns are a span ref's columns in ScanSpanRef's order (the
// test helpers of catalog/writepath read refs with them too).
const SpanRefColumns = `stream_id, first_record, record_count, star, class, slot_epochs, slot_seqs, footer_offsets, footer_lengths, absorbed_at`

// ScanSpanRef scans a row of SpanRefColumns into a SpanRef, checking that
// its slot arrays line up.
func ScanSpanRef(r pgx.Row) (SpanRef, error) {
	var (
		ref                      SpanRef
		epochs, seqs, offs, lens []int64
	)
	if err := r.Scan(&ref.Stream, &ref.FirstRecord, &ref.RecordCount, &ref.Star, &ref.Class, &epochs, &seqs, &offs, &lens, &ref.AbsorbedAt); err != nil {
		return ref, err
	}
	if len(epochs) == 0 || len(seqs) != len(epochs) || len(offs) != len(epochs) || len(lens) != len(epochs) {
		return ref, fmt.Errorf("span ref %s@%d: slot arrays of lengths %d/%d/%d/%d (must be equal and >= 1)",
			ref.Stream, ref.FirstRecord, len(epochs), len(seqs), len(offs), len(lens))
	}
	ref.Slots = make([]SlotRef, len(epochs))
	for i := range epochs {
		ref.Slots[i] = SlotRef{Epoch: epochs[i], Seq: seqs[i], FooterOffset: offs[i], FooterLength: lens[i]}
	}
	return ref, nil
}

// RefsWindow reads at most limit of a stream's span refs that end past from
// and start before before, in record order (an index range: the settle
// commits delete refs once they are wholly settled).
func (s *Settle) RefsWindow(ctx context.Context, id StreamID, from, before int64, limit int) ([]SpanRef, error) {
	return refsWindow(ctx, s.db.pool, id, from, before, limit)
}

func refsWindow(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, id StreamID, from, before int64, limit int) ([]SpanRef, error) {
	rows, err := q.Query(ctx, `SELECT `+SpanRefColumns+` FROM nova.span_refs
		WHERE stream_id = $1 AND first_record < $3 AND first_record + record_count > $2
		ORDER BY first_record LIMIT $4`, id, from, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s from %d: %w", id, from, err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) })
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s from %d: %w", id, from, err)
	}
	return refs, nil
}

// DueMarkers lists a star's due markers, oldest first.
func (ss *Streams) DueMarkers(ctx context.Context, star string) ([]DueMarker, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT d.stream_id, d.class, d.since FROM nova.due_markers d
		JOIN nova.streams s USING (stream_id) WHERE s.star = $1 ORDER BY d.since, d.stream_id`, star)
	if err != nil {
		return nil, fmt.Errorf("read due markers of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueMarker, error) {
		var m DueMarker
		return m, r.Scan(&m.Stream, &m.Class, &m.Since)
	})
	if err != nil {
		return nil, fmt.Errorf("read due markers of star %q: %w", star, err)
	}
	return out, nil
}

const entryCols = `stream_id, epoch, first_record, revision, record_count, object_bytes, footer_offset, footer_length, min_timestamp, max_timestamp, class, settled_at`

func scanEntry(r pgx.Row) (Entry, error) {
	var e Entry
	err := r.Scan(&e.Stream, &e.Epoch, &e.FirstRecord, &e.Revision, &e.RecordCount, &e.ObjectBytes,
		&e.FooterOffset, &e.FooterLength, &e.MinTimestamp, &e.MaxTimestamp, &e.Class, &e.SettledAt)
	return e, err
}

// EntriesOfStream reads a stream's catalog entries in record order.
func (ss *Streams) EntriesOfStream(ctx context.Context, id StreamID) ([]Entry, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT `+entryCols+` FROM nova.catalog WHERE stream_id = $1 ORDER BY epoch, first_record`, id)
	if err != nil {
		return nil, fmt.Errorf("read catalog of stream %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return nil, fmt.Errorf("read catalog of stream %s: %w", id, err)
	}
	return out, nil
}
