package settle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// published is what one publish attempt produced: the object now standing at
// the key and what it covers (the plan's output, or an adopted object).
type published struct {
	key      string
	first    uint64
	revision uint32
	entries  []bundlefmt.Entry // its chunks, offsets from 0
	size     uint64
	footOff  uint64
	footLen  uint64
	adopted  bool
	result   objstore.AssembleResult
}

func (p *published) end() uint64 { return p.entries[len(p.entries)-1].EndRecord() }

// tail is the published object as a stream's standing tail.
func (p *published) tail() *Tail {
	return &Tail{Key: p.key, FirstRecord: p.first, Revision: p.revision, Entries: p.entries}
}

// catalogEntry is the catalog row describing the published object.
func (p *published) catalogEntry(stream catalog.StreamID, epoch int64) catalog.Entry {
	e := catalog.Entry{Stream: stream, Epoch: epoch, FirstRecord: int64(p.first), Revision: int32(p.revision),
		ObjectBytes: int64(p.size), FooterOffset: int64(p.footOff), FooterLength: int64(p.footLen), Class: catalog.ClassStandard}
	for i := range p.entries {
		e.RecordCount += int64(p.entries[i].Count())
	}
	e.MinTimestamp, e.MaxTimestamp = bundlefmt.TimestampRange(p.entries)
	return e
}

// points names the crash points of one publish path: settle's, or the
// erasure step's rewrite (same steps, its own names: crash.go).
type points struct {
	afterIntent, afterUploadCreated, afterSidecarStaged, afterPartCopied, afterPartGathered,
	afterComplete, afterAdoptionRead, beforeCommit, afterCommit crashpoint.Point
}

var (
	settlePoints = points{CrashAfterIntent, CrashAfterUploadCreated, CrashAfterSidecarStaged,
		CrashAfterPartCopied, CrashAfterPartGathered, CrashAfterComplete, CrashAfterAdoptionRead,
		CrashBeforeCommit, CrashAfterCommit}
	erasePoints = points{CrashEraseAfterIntent, CrashEraseAfterUploadCreated, CrashEraseAfterSidecarStaged,
		CrashEraseAfterPartCopied, CrashEraseAfterPartGathered, CrashEraseAfterComplete,
		CrashEraseAfterAdoptionRead, CrashEraseBeforeCommit, CrashEraseAfterCommit}
)

// publish carries out steps 1-3 of docs/architecture.md#publish for one
// output outside the settle pipeline (the erasure step's rewrites, a
// reconcile cut): its publish intent, a batch of one, then put.
func (s *Settler) publish(ctx context.Context, f catalog.Fence, o Output, known []knownChunk, pt points) (*published, int64, error) {
	target, err := Target(o.Key)
	if err != nil {
		return nil, 0, err
	}
	ins, errs, err := s.d.DB.OpenPublishIntents(ctx, f, []catalog.IntentRequest{{Target: target, Class: catalog.ClassStandard}})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return nil, 0, err
	}
	in := ins[0]
	// The intent may be above the planned revision: the base used that
	// one before, and its key may be deleted, late, at any time
	// (docs/architecture.md#no-late-delete). The bytes do not name their
	// revision; only the key changes.
	o.Key, o.Revision = in.ObjectKey, uint32(in.Revision)
	s.crash(pt.afterIntent)
	p, err := s.put(ctx, f, o, in, known, pt)
	return p, in.ID, err
}

// put writes the output o under its open publish intent in: the
// create-once assembly (resuming the intent's upload if one is open), and
// on 412 the adoption of the standing object. known lists every chunk the
// stream has in this plan (standing tail first), to check a standing
// object against.
func (s *Settler) put(ctx context.Context, f catalog.Fence, o Output, in catalog.Intent, known []knownChunk, pt points) (*published, error) {
	if in.Reopened {
		// The attempt that opened this intent may have created an upload
		// and died before recording its ID: abort every open upload of
		// the key but the recorded one, or it would stay open forever.
		if err := s.abortUploads(ctx, o.Key, in.UploadID); err != nil {
			return nil, err
		}
	}
	res, err := s.assemble(ctx, o, s.assembleRequest(ctx, f, o, in, pt))
	if err == nil {
		return &published{key: o.Key, first: o.FirstRecord, revision: o.Revision, entries: o.Footer.Entries,
			size: o.Footer.ObjectSize, footOff: o.Footer.FooterOffset, footLen: o.Footer.FooterLength, result: res}, nil
	}
	if ferr := s.assembleFailed(ctx, o, err); ferr != nil {
		return nil, ferr
	}
	// 412: an earlier attempt completed this key and crashed before its
	// commit. Adopt the standing bytes, never replace them.
	p, aerr := s.adopt(ctx, o, known)
	s.crash(pt.afterAdoptionRead)
	uploadID := res.UploadID
	if uploadID == "" {
		uploadID = in.UploadID
	}
	if uploadID != "" {
		if err := s.store.AbortAssembly(ctx, s.d.Topology.Standard(), o.Key, uploadID); err != nil {
			return nil, fmt.Errorf("abort our upload of %s after 412: %w", o.Key, err)
		}
	}
	if aerr != nil {
		return nil, aerr
	}
	p.result = res
	return p, nil
}

// assembleFailed judges a failed assembly of the output o: nil when the
// key holds an object now, to adopt (a 412: an earlier attempt completed
// it); else the error to fail the stream with. Some servers answer a
// create-once PUT onto a taken key by closing the connection before
// reading the body (versitygw resets a large PutObject instead of
// answering 412), and a lost answer may hide our own success: when the key
// holds an object now, it is adopted. Never after a checksum failure:
// those bytes are wrong.
func (s *Settler) assembleFailed(ctx context.Context, o Output, err error) error {
	switch {
	case errors.Is(err, objstore.ErrExists):
		return nil
	case errors.Is(err, objstore.ErrChecksum):
		qerr := s.blame(ctx, o, err)
		var q *cycle.QuarantineError
		if errors.Is(err, objstore.ErrPublishedBad) && errors.As(qerr, &q) {
			q.Condemn = o.Key // the key holds the wrong bytes now
		}
		return qerr
	}
	if _, herr := s.store.Head(ctx, s.d.Topology.Standard(), o.Key); herr != nil {
		return bundle.Classify(o.Key, fmt.Errorf("assemble %s: %w", o.Key, err))
	}
	return nil
}

// assembleRequest is the create-once assembly of the output o under its
// publish intent in: it resumes the intent's upload if one is open, and
// its hooks record the upload and each staged part in the intent (fenced)
// as they happen, with the crash points pt between.
func (s *Settler) assembleRequest(ctx context.Context, f catalog.Fence, o Output, in catalog.Intent, pt points) objstore.AssembleRequest {
	req := objstore.AssembleRequest{
		Bucket:            s.d.Topology.Standard(),
		Key:               o.Key,
		ExpectedCRC32C:    o.Footer.ObjectCRC,
		HasExpectedCRC32C: true,
		UploadID:          in.UploadID,
		Hooks: objstore.Hooks{
			UploadCreated: func(id string) error {
				if err := s.d.DB.SetIntentUpload(ctx, f, in.ID, id); err != nil {
					return err
				}
				s.crash(pt.afterUploadCreated)
				return nil
			},
			PartStaged: func(part int) error {
				if err := s.d.DB.AddStagedPart(ctx, f, in.ID, part); err != nil {
					return err
				}
				s.crash(pt.afterSidecarStaged)
				return nil
			},
			PartDone: func(part int, copied bool) error {
				if copied {
					s.crash(pt.afterPartCopied)
				} else {
					s.crash(pt.afterPartGathered)
				}
				return nil
			},
			Completed: func() error { s.crash(pt.afterComplete); return nil },
		},
	}
	if s.d.Pending != nil {
		req.Stager = &partStager{store: s.d.Pending, intent: in.ID, key: o.Key}
	}
	return req
}

// Target is the publish target of a settled key: its base, its revision
// as planned, and the base's key at any revision.
func Target(key string) (catalog.PublishTarget, error) {
	k, err := bundlefmt.ParseSettledKey(key)
	if err != nil {
		return catalog.PublishTarget{}, fmt.Errorf("publish %s: %w", key, err)
	}
	return catalog.PublishTarget{
		Base:     catalog.KeyBase{Stream: k.Stream, Epoch: int64(k.StreamEpoch), FirstRecord: int64(k.FirstRecord)},
		Revision: int32(k.Revision),
		Key: func(rev int32) string {
			at := k
			at.Revision = uint32(rev)
			return at.Key()
		},
	}, nil
}

// blameWindow bounds the bytes blame holds at once.
const blameWindow = 8 << 20

// blame turns an assembly's checksum failure into a quarantine that names
// the damaged slot. A gathered piece's failure names its source already;
// a whole-object check (server side, read-back, or the file backend) cannot
// say which piece was wrong, so each source range is read back in windows
// and checked against the CRC its entries give. Only when every piece
// checks out (or cannot be read) is the output key named instead.
func (s *Settler) blame(ctx context.Context, o Output, err error) error {
	var se *objstore.SourceError
	if errors.As(err, &se) {
		return bundle.Classify(se.Key, err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
pieces:
	for _, p := range o.Pieces {
		if p.Data != nil {
			continue // built here, from bytes checked against their source's DataCRC
		}
		var crc uint32
		for off := uint64(0); off < p.Len; off += blameWindow {
			n := min(blameWindow, p.Len-off)
			data, rerr := s.read.Range(ctx, p.Src, int64(p.Off+off), int64(n))
			if rerr != nil || uint64(len(data)) != n {
				continue pieces // cannot tell from here
			}
			crc = crc32.Update(crc, table, data)
		}
		if crc != p.CRC32C {
			return &cycle.QuarantineError{SlotKey: p.Src.Key, Class: cycle.ClassChecksum,
				Err: fmt.Errorf("bytes [%d, +%d) of %s: CRC-32C %08x, its entries say %08x (assembling %s: %w)",
					p.Off, p.Len, p.Src.Key, crc, p.CRC32C, o.Key, err)}
		}
	}
	return bundle.Classify(o.Key, fmt.Errorf("assemble %s: %w", o.Key, err))
}

// abortUploads aborts every open upload building key except keep.
func (s *Settler) abortUploads(ctx context.Context, key, keep string) error {
	ids, err := s.store.ListAssemblies(ctx, s.d.Topology.Standard(), key)
	if err != nil {
		return fmt.Errorf("find unrecorded uploads of %s: %w", key, err)
	}
	for _, id := range ids {
		if id == keep {
			continue
		}
		if err := s.store.AbortAssembly(ctx, s.d.Topology.Standard(), key, id); err != nil {
			return fmt.Errorf("abort unrecorded upload of %s: %w", key, err)
		}
		s.d.Log.Info("aborted an upload a crash kept from being recorded", "key", key, "upload", id)
	}
	return nil
}

// adopt reads the standing object's trailer and footer and checks it is a
// valid settled bundle of this stream starting at this record whose records
// agree with the sources: per-record lengths and timestamps, chunks on
// source chunk boundaries, and then every data byte (docs/architecture.md#adoption).
func (s *Settler) adopt(ctx context.Context, o Output, known []knownChunk) (*published, error) {
	// A standing object that does not match is never cataloged; it is
	// condemned too, so that once the stream is released the key can be
	// published again from the sources (an object that is only longer than
	// this window knows, left by an attempt under other settings, would
	// otherwise be met again on every release).
	bad := func(err error) error { return notTheSources(o.Key, err) }
	f, err := s.read.StandingFooter(ctx, o.Key)
	if q, ok := cycle.AsQuarantine(err); ok {
		return nil, bad(q.Err)
	}
	if err != nil {
		return nil, err
	}
	size := f.ObjectSize()
	entries, err := f.Entries()
	if err != nil {
		return nil, bad(err)
	}
	expect, err := matchSources(o, entries, known)
	if err != nil {
		return nil, bad(err)
	}
	// The footer agrees with the sources; now the bytes must agree with
	// the footer and, record by record, with the sources, before anything
	// is committed.
	if !s.d.Mutations.SkipAdoptionBytes {
		if err := s.verifyData(ctx, o.Key, entries, expect); err != nil {
			return nil, err
		}
	}
	p := &published{key: o.Key, first: o.FirstRecord, revision: o.Revision, entries: entries, size: uint64(size),
		footOff: f.FooterOffset(), footLen: f.FooterLength(), adopted: true}
	return p, nil
}

// notTheSources is the quarantine of a standing object at key that is not
// what the sources make: class adoption, the key condemned.
func notTheSources(key string, err error) error {
	return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassAdoption, Err: err, Condemn: key}
}

// errBeyondKnown: a standing object's chunks run on past every record its
// plan knows (matchSources). Settle condemns it, as any object that is not
// what the sources make; the erase step, whose plan is exactly one
// cataloged entry, knows it for another plan's object and buries its key
// instead (Eraser.rewriteEntry).
var errBeyondKnown = errors.New("beyond the known records")

// knownChunk is one chunk a plan knows of, to check a standing object
// against: its entry as planned and, when the plan re-encoded it with
// tombstones, its entry and bytes as the source holds them and its new
// bytes (an attempt made under other erasures may have written either, or
// any mix of the two, record by record).
type knownChunk struct {
	e              bundlefmt.Entry
	orig           *bundlefmt.Entry
	origData, data []byte
}

// expectPart is what one stretch of a standing object's settled chunk must
// hold, as the sources say: a known chunk the plan copies as its source
// holds it (its DataCRC, crc), or a known chunk the plan re-encodes (kc),
// whose records adoption reads and compares byte for byte, each with the
// source's record and the planned one (sameRecords).
type expectPart struct {
	off, n  uint64 // object-absolute
	crc     uint32
	kc      *knownChunk
	lengths []uint32 // the standing object's lengths of kc's records
}

// matchSources checks a standing object's entries against the stream's
// known chunks (the plan's sources, standing tail first): every record's
// timestamp, and its length as planned or, for a re-encoded chunk, as its
// source holds it; every settled chunk a run of whole known chunks. It
// returns, for each settled chunk, what its bytes must be (expectPart).
// A chunk made of chunks the plan copies as they are has its DataCRC
// checked here against their combine; one that holds a re-encoded chunk
// is checked when its bytes are read (verifyData): an empty record (0x00)
// and a tombstone (0x08) are both one byte long, so the lengths cannot
// tell which one an attempt under other erasures wrote.
func matchSources(o Output, got []bundlefmt.Entry, known []knownChunk) ([][]expectPart, error) {
	stream := o.Footer.Entries[0].Stream
	if len(got) == 0 {
		return nil, errors.New("standing object has no chunks")
	}
	bounds := map[uint64]int{} // chunk start record -> index in known
	knownEnd := o.FirstRecord
	for i := range known {
		bounds[known[i].e.FirstRecord] = i
		knownEnd = max(knownEnd, known[i].e.EndRecord())
	}
	expect := make([][]expectPart, len(got))
	next := o.FirstRecord
	for ci := range got {
		e := &got[ci]
		if e.Stream != stream {
			return nil, fmt.Errorf("chunk %d belongs to stream %s", ci, e.Stream)
		}
		if e.FirstRecord != next {
			return nil, fmt.Errorf("chunk %d starts at record %d, expected %d", ci, e.FirstRecord, next)
		}
		// Every settled chunk is a run of whole source chunks (sources are
		// never split), so its DataCRC is their combine: with it checked
		// against the sources, the data read that follows checks the bytes
		// against the sources', not merely against themselves.
		i, ok := bounds[e.FirstRecord]
		switch {
		case !ok && e.FirstRecord >= knownEnd:
			return nil, fmt.Errorf("chunk %d starts at record %d, %w (they end at %d)", ci, e.FirstRecord, errBeyondKnown, knownEnd)
		case !ok:
			return nil, fmt.Errorf("chunk %d starts at record %d, inside a source chunk", ci, e.FirstRecord)
		}
		parts, err := matchChunk(ci, e, known[i:])
		if err != nil {
			return nil, err
		}
		expect[ci] = parts
		next = e.EndRecord()
	}
	return expect, nil
}

// matchChunk checks settled chunk ci (e) against the run of known chunks
// that starts at its first record (known, from there on): it must be made
// of whole ones, and when none is re-encoded its DataCRC must be their
// combine. It returns what the chunk's bytes must be, one part per known
// chunk.
func matchChunk(ci int, e *bundlefmt.Entry, known []knownChunk) ([]expectPart, error) {
	crc, at, j, off, reencoded := uint32(0), e.FirstRecord, 0, e.DataOffset, false
	var parts []expectPart
	for k := 0; k < len(known) && at < e.EndRecord(); k++ {
		kc := &known[k]
		n := kc.e.Count()
		if at+uint64(n) > e.EndRecord() {
			return nil, fmt.Errorf("chunk %d [%d, %d) ends inside a source chunk", ci, e.FirstRecord, e.EndRecord())
		}
		size, err := matchRecords(e, j, kc, at)
		if err != nil {
			return nil, err
		}
		part := expectPart{off: off, n: size, crc: kc.e.DataCRC}
		if kc.orig != nil {
			part.kc, part.lengths, reencoded = kc, e.Lengths[j:j+n], true
		}
		parts = append(parts, part)
		crc = bundlefmt.CombineCRC32C(crc, kc.e.DataCRC, int64(size))
		j += n
		at += uint64(n)
		off += size
	}
	if at != e.EndRecord() {
		return nil, fmt.Errorf("chunk %d [%d, %d) reaches %w (they end at %d)", ci, e.FirstRecord, e.EndRecord(), errBeyondKnown, at)
	}
	if !reencoded && crc != e.DataCRC {
		return nil, fmt.Errorf("chunk %d [%d, %d): DataCRC %08x, sources combine to %08x", ci, e.FirstRecord, e.EndRecord(), e.DataCRC, crc)
	}
	return parts, nil
}

// matchRecords checks the records of known chunk kc, which starts at record
// at, against the settled chunk e's from its index j: each record's
// timestamp, and its length as planned or as the source holds it (a
// re-encoded chunk's). It returns the bytes they take in e.
func matchRecords(e *bundlefmt.Entry, j int, kc *knownChunk, at uint64) (uint64, error) {
	var size uint64
	for r := 0; r < kc.e.Count(); r++ {
		l, ts := e.Lengths[j+r], e.Timestamps[j+r]
		planned := kc.e.Lengths[r]
		orig := planned
		if kc.orig != nil {
			orig = kc.orig.Lengths[r]
		}
		if ts != kc.e.Timestamps[r] || (l != planned && l != orig) {
			return 0, fmt.Errorf("record %d: length %d ts %d; the sources say length %d as planned or %d as the source holds it, ts %d",
				at+uint64(r), l, ts, planned, orig, kc.e.Timestamps[r])
		}
		size += uint64(l)
	}
	return size, nil
}

// sameRecords checks the standing bytes of a re-encoded known chunk, whose
// records have the given lengths, record by record: each must be byte for
// byte the source's record or the planned one (the tombstone of an erased
// record). Lengths alone cannot tell an empty record from a tombstone.
func sameRecords(kc *knownChunk, lengths []uint32, data []byte) error {
	var po, oo, so uint64
	for r, l := range lengths {
		pl, ol := uint64(kc.e.Lengths[r]), uint64(kc.orig.Lengths[r])
		rec := data[so : so+uint64(l)]
		if !bytes.Equal(rec, kc.data[po:po+pl]) && !bytes.Equal(rec, kc.origData[oo:oo+ol]) {
			return fmt.Errorf("record %d (%d bytes) is neither the source's record (%d bytes) nor the planned one (%d bytes)",
				kc.e.FirstRecord+uint64(r), l, ol, pl)
		}
		po += pl
		oo += ol
		so += uint64(l)
	}
	return nil
}

// assemble runs the publish's assembly of o. The pieces copy each source
// from its class's copy source in the topology (for an express slot, the
// first zone the shared health does not hold off); when a copy source
// fails (down, or missing its copy of the slot) the topology holds it off
// and the assembly runs again from the next zone, keeping the upload and
// its parts. A recorded upload that is gone is started afresh.
func (s *Settler) assemble(ctx context.Context, o Output, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	pieces := func() ([]objstore.Piece, error) {
		out := make([]objstore.Piece, 0, len(o.Pieces)+1)
		for _, p := range o.Pieces {
			if p.Data != nil {
				out = append(out, objstore.DataPiece(p.Data))
				continue
			}
			src, err := s.d.Topology.CopySource(p.Src.Class)
			if err != nil {
				return nil, fmt.Errorf("copy %s into %s: %w", p.Src.Key, o.Key, err)
			}
			out = append(out, objstore.Piece{SrcBucket: src, SrcKey: p.Src.Key,
				Off: int64(p.Off), Len: int64(p.Len), CRC32C: p.CRC32C, HasCRC32C: true})
		}
		return append(out, objstore.DataPiece(o.Footer.Bytes)), nil
	}
	var put []byte                // the object's bytes, when the store PUT it whole from here
	req.Source = s.pieceSource(o) // fetch.go
	req.Hooks.Put = func(data []byte) { put = data }
	var err error
	if req.Pieces, err = pieces(); err != nil {
		return objstore.AssembleResult{}, err
	}
	res, err := s.store.Assemble(ctx, req)
	for again := true; again; {
		var se *objstore.SourceError
		switch {
		case errors.Is(err, objstore.ErrNoUpload) && req.UploadID != "":
			// The recorded upload is gone: it completed (and the object
			// stands: the fresh attempt gets 412 and adopts it) or was
			// aborted.
			req.UploadID = ""
		case errors.As(err, &se) && !errors.Is(err, objstore.ErrChecksum) && ctx.Err() == nil && s.d.Topology.SourceFailed(se.Bucket):
			// An express zone failed as a copy source (down, or missing
			// its copy of the slot): the same bytes are under the same
			// key in the next zone. The upload and its parts are kept.
			s.d.Log.Warn("express zone failed as a copy source; assembling from the next zone",
				"key", o.Key, "bucket", se.Bucket, "err", err)
			if res.UploadID != "" {
				req.UploadID = res.UploadID
			}
			if req.Pieces, err = pieces(); err != nil {
				return res, err
			}
		default:
			again = false
			continue
		}
		res, err = s.store.Assemble(ctx, req)
	}
	if err == nil {
		s.keepTail(o, put) // fetch.go
	}
	return res, err
}
