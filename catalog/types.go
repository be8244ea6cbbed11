package catalog

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The metastore's row types (docs/metastore.md) with the column lists
// and scanners every statement that reads them shares, and the run
// ledger's counters (RunCounts). The statements that read and write
// them are with their concern (stores.go).

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

const streamCols = `stream_id, star, bucket, epoch, class, next_record, low_record, settled_through`

func scanStream(r pgx.Row) (Stream, error) {
	var s Stream
	err := r.Scan(&s.ID, &s.Star, &s.Bucket, &s.Epoch, &s.Class, &s.NextRecord, &s.LowRecord, &s.SettledThrough)
	return s, err
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

const entryCols = `stream_id, epoch, first_record, revision, record_count, object_bytes, footer_offset, footer_length, min_timestamp, max_timestamp, class, settled_at`

func scanEntry(r pgx.Row) (Entry, error) {
	var e Entry
	err := r.Scan(&e.Stream, &e.Epoch, &e.FirstRecord, &e.Revision, &e.RecordCount, &e.ObjectBytes,
		&e.FooterOffset, &e.FooterLength, &e.MinTimestamp, &e.MaxTimestamp, &e.Class, &e.SettledAt)
	return e, err
}

// RunCounts are the counters of a run row.
type RunCounts struct {
	StreamsSettled     int64 `json:"streams_settled"`
	StreamsQuarantined int64 `json:"streams_quarantined"`
	ObjectsPublished   int64 `json:"objects_published"`
	ObjectsAdopted     int64 `json:"objects_adopted"`
	BytesCopied        int64 `json:"bytes_copied"`
	BytesFetched       int64 `json:"bytes_fetched"`
	BytesUploaded      int64 `json:"bytes_uploaded"`
	S3Requests         int64 `json:"s3_requests"`
	SlotsReaped        int64 `json:"slots_reaped"`
	ObjectsReaped      int64 `json:"objects_reaped"`
	ObjectsRewritten   int64 `json:"objects_rewritten"`
	RecordsTombstoned  int64 `json:"records_tombstoned"`
	ErasuresApplied    int64 `json:"erasures_applied"`
	// BytesReadBack is the part of BytesFetched that read published
	// objects back to check them (objstore.ReadBack). Not a ledger
	// column: reported with the run (auditor run --once) and in
	// nova_auditor_bytes_total{path="read_back"}; 0 (and left out of
	// the JSON) in a run read from the ledger.
	BytesReadBack int64 `json:"bytes_read_back,omitempty"`
}

// Add accumulates o into c.
func (c *RunCounts) Add(o RunCounts) {
	c.StreamsSettled += o.StreamsSettled
	c.StreamsQuarantined += o.StreamsQuarantined
	c.ObjectsPublished += o.ObjectsPublished
	c.ObjectsAdopted += o.ObjectsAdopted
	c.BytesCopied += o.BytesCopied
	c.BytesFetched += o.BytesFetched
	c.BytesUploaded += o.BytesUploaded
	c.S3Requests += o.S3Requests
	c.SlotsReaped += o.SlotsReaped
	c.ObjectsReaped += o.ObjectsReaped
	c.ObjectsRewritten += o.ObjectsRewritten
	c.RecordsTombstoned += o.RecordsTombstoned
	c.ErasuresApplied += o.ErasuresApplied
	c.BytesReadBack += o.BytesReadBack
}
