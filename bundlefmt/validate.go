package bundlefmt

// Validation against every rule of docs/format.md, in the order of
// docs/format.md#validation-and-errors: what a caller expects of an object
// from its key (Expect, ExpectFromKey), then the footer level
// (ValidateFooter) and the whole object (ValidateObject,
// ValidateObjectFrom). The envelope level is decode.go's.

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Expect names what the caller knows about an object from its key. Key is
// used in errors. Kind KindUnknown sniffs the bytes; KindSlot accepts a
// flight or a poison. With CheckKey, a slot's envelope epoch/seq must equal
// Epoch/Seq and a settled object's first chunk must be of Stream starting at
// FirstRecord (ExpectFromKey fills all of this from a key).
type Expect struct {
	Key         string
	Kind        Kind
	Epoch, Seq  uint64 // slot epoch and seq
	Stream      StreamID
	FirstRecord uint64
	CheckKey    bool
}

// ExpectFromKey derives what an object's key says about it: a slot key gives
// the kind (slot: flight or poison) and epoch/seq, a settled key the stream
// and first record. The key may carry a store prefix (anything ending in "/"
// before the canonical part); Expect.Key keeps the key as given.
func ExpectFromKey(key string) (Expect, error) {
	exp := Expect{Key: key, CheckKey: true}
	segs := strings.Split(key, "/")
	n := len(segs)
	// A bucket may be named "stars", so try both shapes.
	if n >= 6 && segs[n-6] == "buckets" {
		if p, err := ParseSettledKey(strings.Join(segs[n-6:], "/")); err == nil {
			exp.Kind, exp.Stream, exp.FirstRecord = KindSettled, p.Stream, p.FirstRecord
			return exp, nil
		}
	}
	if n >= 5 && segs[n-5] == "stars" {
		if _, epoch, seq, err := ParseSlotKey(strings.Join(segs[n-5:], "/")); err == nil {
			exp.Kind, exp.Epoch, exp.Seq = KindSlot, epoch, seq
			return exp, nil
		}
	}
	return Expect{}, fmt.Errorf("key %q is neither a canonical slot key nor a canonical settled key", key)
}

// Object is a validated object.
type Object struct {
	Kind     Kind
	Envelope Envelope // transit only
	Footer   *Footer  // nil for a poison
	Entries  []Entry  // with data offsets; nil for a poison
}

// ChunkData returns chunk i's bytes within obj (the bytes ValidateObject
// saw); i must be in [0, len(o.Entries)), so never for a poison.
func (o *Object) ChunkData(obj []byte, i int) []byte {
	off := o.Footer.DataOffset(i)
	return obj[off : off+o.Footer.Row(i).ChunkBytes]
}

// sniff returns the kind a bare object's first bytes announce.
func sniff(key string, obj []byte) (Kind, error) {
	switch {
	case len(obj) >= magicLen && string(obj[envMagicOff:envMagicOff+magicLen]) == envelopeMagic:
		return KindSlot, nil
	case len(obj) >= 1 && obj[recFlagsOff]&flagReserved == 0: // chunk 0's first record at SettledBase
		return KindSettled, nil
	}
	return KindUnknown, corruptf(key, 0, "object", "neither a slot (CHNE) nor a settled object (first byte ≤ 0x0f)")
}

// ValidateObject checks a whole object against every rule of docs/format.md, in
// the order of docs/format.md#validation-and-errors: (1) envelope on its own, its key and real size;
// (2) trailer; (3) footer bounds and window agreement; (4) directory CRC,
// index CRC; (5) per row, entry range then entry CRC; (6) per chunk, range
// then DataCRC; (7) every remaining rule (rows, entries, records, key).
// Entries are decoded only after everything has passed. obj is aliased.
func ValidateObject(obj []byte, exp Expect) (*Object, error) {
	whole := func(off, n uint64) ([]byte, error) { return obj[off : off+n], nil }
	return ValidateObjectFrom(uint64(len(obj)), whole, 0, exp)
}

// RangeReader returns bytes [off, off+n) of the object ValidateObjectFrom
// checks; off+n never exceeds the size it was given.
type RangeReader func(off, n uint64) ([]byte, error)

// ReadError is a RangeReader's failure, returned by ValidateObjectFrom as
// it is: the object could not be read, which says nothing of its format
// (no class of ClassOf).
type ReadError struct {
	Off, N uint64
	Err    error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("read [%d, +%d): %v", e.Off, e.N, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// ValidateObjectFrom is ValidateObject over an object of size bytes read in
// ranges, with the same rules in the same order: it reads the envelope's
// bytes, the trailer, the footer window, and then each chunk in windows of
// at most window bytes, each ending at a record's end (a record longer
// than window is read alone; window 0: each chunk at once). So it holds at
// most the footer window and max(window, the longest record) of data.
// The chunks are not kept: Object.Entries come without their bytes.
func ValidateObjectFrom(size uint64, read RangeReader, window uint64, exp Expect) (*Object, error) {
	rd := func(off, n uint64) ([]byte, error) {
		b, err := read(off, n)
		if err != nil {
			return nil, &ReadError{Off: off, N: n, Err: err}
		}
		return b, nil
	}
	key := exp.Key
	head, err := rd(0, min(size, EnvelopeSize))
	if err != nil {
		return nil, err
	}
	kind := exp.Kind
	if kind == KindUnknown {
		if kind, err = sniff(key, head); err != nil {
			return nil, err
		}
	}
	o := &Object{Kind: kind}
	base := uint64(SettledBase)
	if kind != KindSettled {
		env, err := ValidateEnvelope(head, exp)
		if err != nil {
			return nil, err
		}
		if env.ObjectSize != size {
			return nil, corruptf(key, envObjectSizeOff, "envelope.object_size", "object size %d ≠ real size %d", env.ObjectSize, size)
		}
		o.Kind, o.Envelope = env.Kind, env
		if env.Kind == KindPoison {
			return o, nil
		}
		base = TransitBase
	}
	tail, err := rd(size-min(size, TrailerSize), min(size, TrailerSize))
	if err != nil {
		return nil, err
	}
	t, err := DecodeTrailer(key, tail, size)
	if err != nil {
		return nil, err
	}
	buf, err := rd(t.DirOffset, size-t.DirOffset)
	if err != nil {
		return nil, err
	}
	f, err := openFooter(key, t.DirOffset, buf, size, base)
	if err != nil {
		return nil, err
	}
	if base == TransitBase {
		if o.Envelope.FooterOffset != t.FooterOffset() {
			return nil, corruptf(key, envFooterOffsetOff, "envelope.footer_offset", "envelope footer offset %d ≠ trailer's %d", o.Envelope.FooterOffset, t.FooterOffset())
		}
		if o.Envelope.FooterLength != t.FooterLength() {
			return nil, corruptf(key, envFooterLengthOff, "envelope.footer_length", "envelope footer length %d ≠ trailer's %d", o.Envelope.FooterLength, t.FooterLength())
		}
	}
	views, err := f.verify(&chunkSource{read: rd, window: window}, exp)
	if err != nil {
		return nil, err
	}
	o.Footer = f
	o.Entries = make([]Entry, len(views))
	for i, v := range views {
		o.Entries[i] = v.Entry()
	}
	return o, nil
}

// chunkSource is where Footer.verify reads the chunks' bytes from.
type chunkSource struct {
	read   func(off, n uint64) ([]byte, error)
	window uint64 // 0: a chunk at once
}

// ValidateFooter checks a footer window (buf = [footerOffset, objectSize))
// at the footer + trailer level, in docs/format.md#validation-and-errors order: everything but the
// chunk bytes. exp.Kind selects the base (KindSettled: SettledBase; a slot
// kind: TransitBase).
func ValidateFooter(footerOffset uint64, buf []byte, objectSize uint64, exp Expect) (*Footer, error) {
	base := uint64(TransitBase)
	switch exp.Kind {
	case KindSettled:
		base = SettledBase
	case KindFlight, KindSlot:
	default:
		return nil, fmt.Errorf("%w: a footer needs the kind flight, slot or settled, not %s", ErrInvalid, exp.Kind)
	}
	f, err := openFooter(exp.Key, footerOffset, buf, objectSize, base)
	if err != nil {
		return nil, err
	}
	if _, err := f.verify(nil, exp); err != nil {
		return nil, err
	}
	return f, nil
}

// verify runs steps (4) to (7) of docs/format.md#validation-and-errors on an opened footer; with src
// nil it skips the chunk bytes (step 6 and the record rules).
func (f *Footer) verify(src *chunkSource, exp Expect) ([]EntryView, error) {
	key := f.key
	// (4) directory CRC, then index CRC.
	if err := f.checkDirCRC(); err != nil {
		return nil, err
	}
	if err := f.checkIndexCRC(); err != nil {
		return nil, err
	}
	// (5) per row: the entry's range (tiling the directory), then its CRC.
	dirEnd := f.off + f.trailer.DirLength
	entOff := f.off
	for i := 0; i < f.n; i++ {
		r := f.Row(i)
		if r.EntryOffset != entOff {
			return nil, f.rowErr(i, rowEntryOffsetOff, "entry_offset", "entry offset %d, want %d (gap or overlap)", r.EntryOffset, entOff)
		}
		if uint64(r.EntryLength) > dirEnd-entOff || r.EntryLength < minEntryLen {
			return nil, f.rowErr(i, rowEntryLengthOff, "entry_length", "entry [%d, +%d) outside the directory [%d, %d) or shorter than %d",
				r.EntryOffset, r.EntryLength, f.off, dirEnd, minEntryLen)
		}
		if err := f.checkEntryCRC(i, r, f.dir[entOff-f.off:entOff-f.off+uint64(r.EntryLength)]); err != nil {
			return nil, err
		}
		entOff += uint64(r.EntryLength)
	}
	if entOff != dirEnd {
		return nil, corruptf(key, f.size-TrailerSize+trDirLengthOff, "trailer.dir_length", "Σ entry lengths %d ≠ directory length %d", entOff-f.off, f.trailer.DirLength)
	}
	// (6) per chunk: its range (tiling the data region), then its DataCRC.
	// Record rules belong to step 7; they are checked here while the chunk is
	// in cache, and the first failure is held back until step 7.
	var recErr error
	if src != nil {
		pos := f.base
		for i := 0; i < f.n; i++ {
			r := f.Row(i)
			eb := f.entryRange(i, r)
			do := binary.LittleEndian.Uint64(eb[entDataOffsetOff:])
			if do != pos {
				return nil, f.entryErr(i, r, entDataOffsetOff, "data_offset", "data offset %d, want %d (gap or overlap)", do, pos)
			}
			if r.ChunkBytes > f.off-pos {
				return nil, f.rowErr(i, rowChunkBytesOff, "chunk_bytes", "chunk [%d, +%d) runs past the directory at %d", pos, r.ChunkBytes, f.off)
			}
			c, chunkRecErr, err := f.readChunk(src, i, eb, pos, r.ChunkBytes)
			if err != nil {
				return nil, err
			}
			if stored := binary.LittleEndian.Uint32(eb[entDataCRCOff:]); c != stored {
				return nil, checksumErr(key, pos, fmt.Sprintf("chunk[%d].data_crc", i), stored, c)
			}
			if recErr == nil {
				recErr = chunkRecErr
			}
			pos += r.ChunkBytes
		}
		if pos != f.off {
			return nil, corruptf(key, f.size-TrailerSize+trDirOffsetOff, "trailer.dir_offset", "base %d + Σ chunk bytes %d ≠ directory offset %d", f.base, pos-f.base, f.off)
		}
	}
	// (7) every remaining rule.
	if err := f.checkRows(); err != nil {
		return nil, err
	}
	views := make([]EntryView, f.n)
	for i := range views {
		r := f.Row(i)
		v, err := f.checkEntry(i, r, f.entryRange(i, r))
		if err != nil {
			return nil, err
		}
		views[i] = v
	}
	if exp.CheckKey && f.base == SettledBase {
		r := f.Row(0)
		if r.Stream != exp.Stream {
			return nil, f.rowErr(0, rowStreamOff, "stream", "stream %s ≠ key's %s", r.Stream, exp.Stream)
		}
		if r.FirstRecord != exp.FirstRecord {
			return nil, f.rowErr(0, rowFirstRecordOff, "first_record", "first record %d ≠ key's %d", r.FirstRecord, exp.FirstRecord)
		}
	}
	if recErr != nil {
		return nil, recErr
	}
	return views, nil
}

// readChunk reads chunk i ([pos, pos+size)) from src and returns its
// CRC-32C and the first stored record of it that breaks
// docs/format.md#stored-record (or, in a transit bundle, is a tombstone).
// It trusts the CRC-verified entry eb but not yet its agreement with the
// row, so it checks no record (and reads in plain windows) when the
// entry's record lengths do not frame the chunk: step 7 reports that.
// It reads in src's windows, each ending at a record's end.
func (f *Footer) readChunk(src *chunkSource, i int, eb []byte, pos, size uint64) (crc uint32, recErr, err error) {
	lens := recordLengths(eb, size)
	step := src.window
	if step == 0 {
		step = size
	}
	var (
		j  int    // the next record
		at uint64 // the next byte of the chunk
	)
	for at < size {
		n := min(step, size-at)
		if lens != nil {
			// Whole records only, at least one.
			n = 0
			for k := j; k < len(lens) && (k == j || n+lens[k] <= step); k++ {
				n += lens[k]
			}
		}
		data, err := src.read(pos+at, n)
		if err != nil {
			return 0, nil, err
		}
		crc = UpdateCRC32C(crc, data)
		for p := uint64(0); lens != nil && p < n; j++ {
			rec := data[p : p+lens[j]]
			// Fast path: a record without headers is valid iff its flags are 0.
			if recErr == nil && rec[recFlagsOff] != 0 {
				if _, fe := parseRecord(rec, f.base != TransitBase); fe != nil {
					fe.Key = f.key
					fe.Offset += int64(pos + at + p)
					fe.Field = fmt.Sprintf("chunk[%d].%s[%d]%s", i, "record", j, fe.Field[len("record"):])
					recErr = fe
				}
			}
			p += lens[j]
		}
		at += n
	}
	return crc, recErr, nil
}

// recordLengths returns the record lengths entry eb gives a chunk of size
// bytes, or nil when they do not frame it (no record, a record of no
// bytes, a sum other than size).
func recordLengths(eb []byte, size uint64) []uint64 {
	n := uint64(binary.LittleEndian.Uint32(eb[entCountOff:]))
	if n == 0 || uint64(len(eb)) < EntryFixed+entLengthLen*n {
		return nil
	}
	raw := eb[EntryFixed : EntryFixed+entLengthLen*n]
	lens := make([]uint64, n)
	var sum uint64
	for j := range lens {
		lens[j] = uint64(binary.LittleEndian.Uint32(raw[entLengthLen*j:]))
		if lens[j] == 0 {
			return nil
		}
		sum += lens[j]
	}
	if sum != size {
		return nil
	}
	return lens
}
