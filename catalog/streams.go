package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The Streams concern's reads: one star, stream or stream's catalog at a
// time, for status, ls, verify and the operator's commands; and below,
// a whole star's rows at once.

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

// Star-wide reads over the contract's tables, for `novasim check` and the
// tests: every stream of a star in one statement, where the auditor's own
// accessors read one stream or one window at a time. They only read.

// TrimCursor reads a star's trim cursor: the first slot trim has not yet
// released. ok is false when trim has released nothing yet.
func (ss *Streams) TrimCursor(ctx context.Context, star string) (epoch, seq int64, ok bool, err error) {
	err = ss.db.reader(ctx).QueryRow(ctx, `SELECT epoch, seq FROM nova.trim_cursors WHERE star = $1`, star).Scan(&epoch, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read trim cursor of star %q: %w", star, err)
	}
	return epoch, seq, true, nil
}

// RefsOfStar reads the span refs of every stream of a star (by the streams'
// star, whatever the refs say), each stream's in record order.
func (ss *Streams) RefsOfStar(ctx context.Context, star string) (map[StreamID][]SpanRef, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT `+SpanRefColumns+` FROM nova.span_refs
		WHERE stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY stream_id, first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read refs of star %q: %w", star, err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) })
	if err != nil {
		return nil, fmt.Errorf("read refs of star %q: %w", star, err)
	}
	out := map[StreamID][]SpanRef{}
	for _, r := range refs {
		out[r.Stream] = append(out[r.Stream], r)
	}
	return out, nil
}

// EntriesOfStar reads the catalog entries of every stream of a star, each
// stream's in (epoch, first record) order.
func (ss *Streams) EntriesOfStar(ctx context.Context, star string) (map[StreamID][]Entry, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT `+entryCols+` FROM nova.catalog
		WHERE stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY stream_id, epoch, first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read catalog of star %q: %w", star, err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return nil, fmt.Errorf("read catalog of star %q: %w", star, err)
	}
	out := map[StreamID][]Entry{}
	for _, e := range entries {
		out[e.Stream] = append(out[e.Stream], e)
	}
	return out, nil
}

// ErasuresOfStar reads the erasures of every stream of a star.
func (ss *Streams) ErasuresOfStar(ctx context.Context, star string) (map[StreamID][]Erasure, error) {
	rows, err := ss.db.reader(ctx).Query(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
		WHERE e.stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY e.stream_id, e.first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read erasures of star %q: %w", star, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
	if err != nil {
		return nil, fmt.Errorf("read erasures of star %q: %w", star, err)
	}
	out := map[StreamID][]Erasure{}
	for _, e := range all {
		out[e.Stream] = append(out[e.Stream], e)
	}
	return out, nil
}

// DueMarkersOfStar reads the due markers of every stream of a star, by
// stream.
func (ss *Streams) DueMarkersOfStar(ctx context.Context, star string) (map[StreamID]DueMarker, error) {
	marks, err := ss.DueMarkers(ctx, star)
	if err != nil {
		return nil, err
	}
	out := make(map[StreamID]DueMarker, len(marks))
	for _, m := range marks {
		out[m.Stream] = m
	}
	return out, nil
}
