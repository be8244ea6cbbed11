package bundlefmt

import (
	"slices"
)

// EraseRecords is the GC rewrite of one chunk (docs/format.md#stored-record):
// every record for which dead reports true becomes the one-byte tombstone
// 0x08, keeping its record number, timestamp and batch-end flag; every other
// record keeps its bytes. data must be the chunk's bytes, whose CRC-32C
// must be e.DataCRC (ErrChecksum otherwise: never re-encode bytes nobody
// checked). key and e.DataOffset name the bytes in errors.
//
// It returns the new entry (DataOffset unchanged: the caller lays the chunk
// out), the new bytes, and the number of records that changed: a dead
// record that already is a tombstone is not counted, so a chunk whose dead
// records are all tombstones already comes back unchanged (changed 0) and
// needs no rewrite.
func EraseRecords(key string, e Entry, data []byte, dead func(record uint64) bool) (Entry, []byte, int, error) {
	if uint64(len(data)) != e.ChunkBytes() {
		return e, nil, 0, corruptf(key, e.DataOffset, "chunk.data", "%d bytes, the entry's lengths sum to %d", len(data), e.ChunkBytes())
	}
	if got := CRC32C(data); got != e.DataCRC {
		return e, nil, 0, checksumErr(key, e.DataOffset, "chunk.data_crc", e.DataCRC, got)
	}
	out := Entry{Stream: e.Stream, FirstRecord: e.FirstRecord, DataOffset: e.DataOffset,
		Lengths: slices.Clone(e.Lengths), Timestamps: slices.Clone(e.Timestamps), BatchEnd: slices.Clone(e.BatchEnd)}
	buf := make([]byte, 0, len(data))
	changed := 0
	off := uint64(0)
	for i, l := range e.Lengths {
		rec := data[off : off+uint64(l)]
		off += uint64(l)
		if !dead(e.FirstRecord + uint64(i)) {
			buf = append(buf, rec...)
			continue
		}
		if !IsTombstone(rec) {
			changed++
		}
		out.Lengths[i] = recFlagsLen
		buf = append(buf, TombstoneByte)
	}
	if changed == 0 {
		return e, data, 0, nil
	}
	out.DataCRC = CRC32C(buf)
	return out, buf, changed, nil
}

// IsTombstone reports whether a stored record is a tombstone.
func IsTombstone(stored []byte) bool {
	return len(stored) == recFlagsLen && stored[recFlagsOff] == TombstoneByte
}

// TruncateRecords keeps the first n records of one chunk: the cut of a
// settled object at a stream's next_record, when a metastore restored from
// backup knows fewer records than the object holds (auditor reconcile).
// data must be the chunk's bytes, whose CRC-32C must be e.DataCRC
// (ErrChecksum otherwise). The kept chunk must end a batch, as every chunk
// does; n must be in [1, e.Count()]. It returns the new entry (DataOffset
// unchanged) and its bytes.
func TruncateRecords(key string, e Entry, data []byte, n int) (Entry, []byte, error) {
	if uint64(len(data)) != e.ChunkBytes() {
		return e, nil, corruptf(key, e.DataOffset, "chunk.data", "%d bytes, the entry's lengths sum to %d", len(data), e.ChunkBytes())
	}
	if got := CRC32C(data); got != e.DataCRC {
		return e, nil, checksumErr(key, e.DataOffset, "chunk.data_crc", e.DataCRC, got)
	}
	if n < 1 || n > e.Count() {
		return e, nil, invalidf("keep %d of the %d records of chunk [%d, %d)", n, e.Count(), e.FirstRecord, e.EndRecord())
	}
	out := Entry{Stream: e.Stream, FirstRecord: e.FirstRecord, DataOffset: e.DataOffset,
		Lengths: slices.Clone(e.Lengths[:n]), Timestamps: slices.Clone(e.Timestamps[:n]),
		BatchEnd: slices.Clone(e.BatchEnd[:batchEndLen(n)])}
	if n%8 != 0 {
		out.BatchEnd[len(out.BatchEnd)-1] &= byte(1)<<(n%8) - 1
	}
	if err := out.validate(); err != nil {
		return e, nil, err
	}
	kept := data[:out.ChunkBytes()]
	out.DataCRC = CRC32C(kept)
	return out, kept, nil
}
