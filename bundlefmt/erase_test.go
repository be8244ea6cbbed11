package bundlefmt

import (
	"errors"
	"testing"
)

func TestEraseRecords(t *testing.T) {
	b := NewChunkBuilder(StreamID{1}, 10)
	for i := 0; i < 5; i++ {
		if err := b.Add(Record{Body: []byte{'a' + byte(i), 'x'}}, int64(100+i), i == 2); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Chunk()
	dead := func(r uint64) bool { return r == 11 || r == 12 }
	e, data, n, err := EraseRecords("k", c.Entry, c.Data, dead)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || e.Lengths[1] != 1 || e.Lengths[2] != 1 || e.Lengths[0] != c.Entry.Lengths[0] {
		t.Fatalf("changed %d, lengths %v", n, e.Lengths)
	}
	if e.Timestamps[2] != 102 || !e.IsBatchEnd(2) || e.DataCRC != CRC32C(data) || uint64(len(data)) != e.ChunkBytes() {
		t.Fatalf("timestamps %v, batch end lost, or CRC wrong", e.Timestamps)
	}
	if !IsTombstone(data[3:4]) || !IsTombstone(data[4:5]) || string(data[0:3]) != string(c.Data[0:3]) {
		t.Fatalf("bytes %q from %q", data, c.Data)
	}
	// Again: the dead records are tombstones already, nothing changes.
	e2, data2, n2, err := EraseRecords("k", e, data, dead)
	if err != nil || n2 != 0 || e2.DataCRC != e.DataCRC || string(data2) != string(data) {
		t.Fatalf("second erase: %d changed, err %v", n2, err)
	}
	// Bytes that do not match the entry's DataCRC are never re-encoded.
	bad := append([]byte(nil), c.Data...)
	bad[0] ^= 1
	if _, _, _, err := EraseRecords("k", c.Entry, bad, dead); !errors.Is(err, ErrChecksum) {
		t.Fatalf("damaged chunk: %v", err)
	}
	if _, _, _, err := EraseRecords("k", c.Entry, c.Data[1:], dead); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short chunk: %v", err)
	}
}

func TestTruncateRecords(t *testing.T) {
	b := NewChunkBuilder(StreamID{1}, 10)
	for i := 0; i < 11; i++ { // batches end at 12 and at 20
		if err := b.Add(Record{Body: []byte{'a' + byte(i), 'x'}}, int64(100+i), i == 2 || i == 10); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Chunk()
	e, data, err := TruncateRecords("k", c.Entry, c.Data, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e.Count() != 3 || e.EndRecord() != 13 || e.DataCRC != CRC32C(data) || uint64(len(data)) != e.ChunkBytes() ||
		string(data) != string(c.Data[:len(data)]) || len(e.BatchEnd) != 1 || e.BatchEnd[0] != 1<<2 || e.Timestamps[2] != 102 {
		t.Fatalf("kept %d records, end %d, batch end %08b, bytes %q", e.Count(), e.EndRecord(), e.BatchEnd, data)
	}
	if e, _, err := TruncateRecords("k", c.Entry, c.Data, 11); err != nil || e.DataCRC != c.Entry.DataCRC {
		t.Fatalf("keeping every record: %v, CRC %08x want %08x", err, e.DataCRC, c.Entry.DataCRC)
	}
	// A cut that would not end a batch, out of range, or over bad bytes.
	for _, n := range []int{2, 5, 0, 12} {
		if _, _, err := TruncateRecords("k", c.Entry, c.Data, n); err == nil {
			t.Errorf("keeping %d records was accepted", n)
		}
	}
	bad := append([]byte(nil), c.Data...)
	bad[0] ^= 1
	if _, _, err := TruncateRecords("k", c.Entry, bad, 3); !errors.Is(err, ErrChecksum) {
		t.Errorf("bad bytes: %v, want ErrChecksum", err)
	}
}
