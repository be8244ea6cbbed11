package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// slotCopy is one bucket's copy of a slot.
type slotCopy struct {
	present bool
	size    int64
	raw     []byte // the 60 envelope bytes
	env     bundlefmt.Envelope
	err     error // the envelope did not decode
}

// slotInfo is one slot key of a chain, over the chain's buckets.
type slotInfo struct {
	id     SlotID
	copies []slotCopy
	named  []assign // ref entries that name it
}

// kind is the slot's kind: a flight when any copy is one (an express seq
// taken by a flight in one bucket and a poison in another is a lost
// flight), else a poison, else unknown.
func (si *slotInfo) kind() bundlefmt.Kind {
	k := bundlefmt.KindUnknown
	for _, c := range si.copies {
		if c.present && c.err == nil {
			if c.env.Kind == bundlefmt.KindFlight {
				return c.env.Kind
			}
			k = c.env.Kind
		}
	}
	return k
}

// first returns the first bucket's copy that decoded, if any.
func (si *slotInfo) first() (int, *slotCopy) {
	for i := range si.copies {
		if si.copies[i].present && si.copies[i].err == nil {
			return i, &si.copies[i]
		}
	}
	return -1, nil
}

func (si *slotInfo) presentAnywhere() bool {
	for _, c := range si.copies {
		if c.present {
			return true
		}
	}
	return false
}

// assign is one ref entry naming a slot.
type assign struct {
	s          *streamState
	ref, entry int
}

// checkChain checks one star's chain and its refs (docs/metastore.md#tables-the-write-path-owns):
// it lists the chain in every bucket of the star's class (novasim check is a
// verifier, where a listing is sanctioned: docs/metastore.md#no-listing),
// classifies every slot, checks the fence runs and end_seq of
// past epochs, and then reads every slot a ref names and verifies the
// records the refs place there.
func (c *checker) checkChain(ctx context.Context, star catalog.Star, content Content, streams []*streamState) error {
	v, err := c.chainView(ctx, star)
	if err != nil {
		return err
	}
	if err := c.listChain(ctx, v); err != nil {
		return err
	}
	if err := c.readEnvelopes(ctx, v.name, v.buckets, v.slots); err != nil {
		return err
	}
	c.assignRefs(v, streams)
	var rep ChainReport
	c.checkSlotPlaces(v, &rep)
	c.checkEpochs(v, &rep)
	c.mu.Lock()
	c.rep.Chain.Slots += rep.Slots
	c.rep.Chain.Flights += rep.Flights
	c.rep.Chain.Poisons += rep.Poisons
	c.rep.Chain.Released += rep.Released
	c.rep.Chain.Referenced += rep.Referenced
	c.rep.Chain.Unreferenced = append(c.rep.Chain.Unreferenced, rep.Unreferenced...)
	c.mu.Unlock()

	// 5. Read every named slot and verify what the refs place there.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Concurrency)
	for _, si := range v.slots {
		if len(si.named) == 0 {
			continue
		}
		g.Go(func() error { return c.checkNamedSlot(gctx, v.name, v.buckets, content, si) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, s := range streams {
		c.checkRefExtents(v.name, s)
	}
	return nil
}

// chainState is what checkChain knows of one star: its slot buckets, epochs,
// trim cursor and, once listed, every slot by (epoch, seq).
type chainState struct {
	star      catalog.Star
	name      string
	buckets   []string
	eps       []catalog.StarEpoch
	endSeq    map[int64]*int64
	ce, cs    int64 // the trim cursor, when hasCursor
	hasCursor bool
	slots     map[[2]int64]*slotInfo
}

// released reports whether slot (e, s) is behind the trim cursor.
func (v *chainState) released(e, s int64) bool {
	return v.hasCursor && (e < v.ce || e == v.ce && s < v.cs)
}

// slot returns the slot (e, s), adding an empty one when it is not known.
func (v *chainState) slot(e, s int64) *slotInfo {
	id := [2]int64{e, s}
	si := v.slots[id]
	if si == nil {
		si = &slotInfo{id: SlotID{Star: v.name, Epoch: e, Seq: s}, copies: make([]slotCopy, len(v.buckets))}
		v.slots[id] = si
	}
	return si
}

// chainView reads the star's buckets, epochs and trim cursor, and checks
// that the epochs are dense and end at the star's.
func (c *checker) chainView(ctx context.Context, star catalog.Star) (*chainState, error) {
	v := &chainState{star: star, name: star.Star, buckets: c.st.slotBuckets(star.ChainClass), endSeq: map[int64]*int64{}, slots: map[[2]int64]*slotInfo{}}
	if len(v.buckets) == 0 {
		return nil, fmt.Errorf("%w: express star %q needs s3-express-buckets", ErrUsage, v.name)
	}
	eps, err := c.db.Streams().StarEpochs(ctx, v.name)
	if err != nil {
		return nil, err
	}
	v.eps = eps
	for i, e := range eps {
		v.endSeq[e.Epoch] = e.EndSeq
		if e.Epoch != int64(i+1) {
			c.invariant(v.name, nil, "", "epochs are not dense: epoch %d at position %d", e.Epoch, i+1)
		}
	}
	if len(eps) == 0 || eps[len(eps)-1].Epoch != star.Epoch {
		c.invariant(v.name, nil, "", "the star is at epoch %d, star_epochs ends at %d", star.Epoch, len(eps))
	}
	v.ce, v.cs, v.hasCursor, err = c.db.Streams().TrimCursor(ctx, v.name)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// listChain is step 1: it lists the chain in each bucket of the star's
// class, and finds any of its slots in the other class's buckets.
func (c *checker) listChain(ctx context.Context, v *chainState) error {
	name := v.name
	prefix := "stars/" + name + "/chain/"
	for bi, b := range v.buckets {
		err := c.st.Store.List(ctx, b, prefix, func(o objstore.ObjectInfo) error {
			key, size := o.Key, o.Size
			kstar, e, s, err := bundlefmt.ParseSlotKey(key)
			if err != nil || kstar != name {
				c.invariant(name, nil, key, "a key under the chain is not a slot key of the star: %v", err)
				return nil
			}
			v.slot(int64(e), int64(s)).copies[bi] = slotCopy{present: true, size: size}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list the chain of star %q in %s: %w", name, b, err)
		}
	}
	// An express star's slots never live in the standard bucket, and a
	// standard star's never in the express set.
	other := c.st.slotBuckets(map[string]string{catalog.ClassStandard: catalog.ClassExpress, catalog.ClassExpress: catalog.ClassStandard}[v.star.ChainClass])
	for _, b := range other {
		if containsString(v.buckets, b) {
			continue
		}
		err := c.st.Store.List(ctx, b, prefix, func(o objstore.ObjectInfo) error {
			c.invariant(name, nil, o.Key, "a %s star's slot in bucket %s, outside its class's buckets", v.star.ChainClass, b)
			return nil
		})
		if err != nil && !errors.Is(err, objstore.ErrBucketNotFound) {
			return fmt.Errorf("list bucket %s: %w", b, err)
		}
	}
	return nil
}

// assignRefs is step 2: refs' rows, order and tiling of the metadata, and
// which slots they name.
func (c *checker) assignRefs(v *chainState, streams []*streamState) {
	for _, s := range streams {
		if s.Class != v.star.ChainClass {
			c.invariant(v.name, s, "", "stream class %q on a %s star", s.Class, v.star.ChainClass)
		}
		c.checkRefRows(v.star, s)
		for i, ref := range s.refs {
			for j, sl := range ref.Slots {
				si := v.slot(sl.Epoch, sl.Seq)
				si.named = append(si.named, assign{s: s, ref: i, entry: j})
			}
		}
	}
}

// checkSlotPlaces is step 3: every slot's place in the chain. A slot named
// by a ref is absorbed, so a flight, below the head, in every bucket, and
// identical everywhere.
func (c *checker) checkSlotPlaces(v *chainState, rep *ChainReport) {
	name, star := v.name, v.star
	for _, si := range v.slots {
		e, s := si.id.Epoch, si.id.Seq
		key := bundlefmt.SlotKey(name, uint64(e), uint64(s))
		if si.presentAnywhere() {
			rep.Slots++
			end, known := v.endSeq[e]
			switch {
			case !known:
				c.invariant(name, nil, key, "slot of epoch %d, which star_epochs does not have", e)
			case end != nil && s >= *end:
				c.invariant(name, nil, key, "slot at or past end_seq %d of its epoch", *end)
			}
		}
		_, cp := si.first()
		if cp != nil {
			switch si.kind() {
			case bundlefmt.KindPoison:
				rep.Poisons++
			case bundlefmt.KindFlight:
				rep.Flights++
				if len(si.named) > 0 {
					rep.Referenced++
				} else {
					rep.Unreferenced = append(rep.Unreferenced, si.id)
				}
			}
		}
		if len(si.named) == 0 {
			continue
		}
		switch {
		case v.released(e, s):
			c.invariant(name, nil, key, "a ref names a slot behind the trim cursor (%d, %d)", v.ce, v.cs)
		case e > star.Epoch || e == star.Epoch && s >= star.NextSeq:
			c.invariant(name, nil, key, "a ref names a slot at or past the absorbed head (%d, %d)", star.Epoch, star.NextSeq)
		}
		if cp != nil && cp.env.Kind == bundlefmt.KindPoison {
			c.invariant(name, nil, key, "a ref names a poison slot")
		}
		for bi, cpy := range si.copies {
			switch {
			case !cpy.present:
				c.invariant(name, nil, key, "a ref names a slot missing from bucket %s", v.buckets[bi])
			case cpy.err != nil:
				c.invariant(name, nil, key, "envelope in bucket %s: %v", v.buckets[bi], cpy.err)
			case cp != nil && (!bytes.Equal(cpy.raw, cp.raw) || cpy.size != cp.size):
				c.invariant(name, nil, key, "an absorbed slot differs between buckets %s and %s", v.buckets[0], v.buckets[bi])
			}
		}
	}
}

// checkEpochs is step 4: past epochs are fenced, with their last W seqs
// poisons or lost flights; in the current epoch every slot below the head
// is in place.
func (c *checker) checkEpochs(v *chainState, rep *ChainReport) {
	name, star, window := v.name, v.star, int64(v.star.FenceWindow)
	for _, ep := range v.eps {
		e := ep.Epoch
		if e == star.Epoch {
			for s := int64(0); s < star.NextSeq; s++ {
				if v.released(e, s) {
					rep.Released++
					continue
				}
				if si := v.slots[[2]int64{e, s}]; si == nil || !si.presentAnywhere() {
					c.invariant(name, nil, bundlefmt.SlotKey(name, uint64(e), uint64(s)), "slot below the absorbed head %d is missing", star.NextSeq)
				}
			}
			continue
		}
		if ep.EndSeq == nil {
			c.invariant(name, nil, "", "past epoch %d has no end_seq (a fence in progress)", e)
			continue
		}
		end := *ep.EndSeq
		if end < window {
			c.invariant(name, nil, "", "epoch %d ends at %d, before one fence window (%d)", e, end, window)
		}
		for s := max(end-window, 0); s < end; s++ {
			key := bundlefmt.SlotKey(name, uint64(e), uint64(s))
			if v.released(e, s) {
				rep.Released++
				continue
			}
			si := v.slots[[2]int64{e, s}]
			switch {
			case si == nil || !si.presentAnywhere():
				c.invariant(name, nil, key, "fence run slot of epoch %d (end_seq %d) is missing", e, end)
			case len(si.named) > 0:
				c.invariant(name, nil, key, "fence run slot of epoch %d (end_seq %d) is absorbed: it must be a poison or a lost flight", e, end)
			}
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readEnvelopes reads the envelope of every present copy.
func (c *checker) readEnvelopes(ctx context.Context, star string, buckets []string, slots map[[2]int64]*slotInfo) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Concurrency * 2)
	var mu sync.Mutex
	for id, si := range slots {
		for bi := range si.copies {
			if !si.copies[bi].present {
				continue
			}
			g.Go(func() error {
				key := bundlefmt.SlotKey(star, uint64(id[0]), uint64(id[1]))
				raw, _, err := c.read(gctx, buckets[bi:bi+1], key, 0, bundlefmt.EnvelopeSize)
				if gctx.Err() != nil {
					return gctx.Err()
				}
				cp := &si.copies[bi]
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if isNotFound(err) {
						cp.present = false // gone since the listing (trim)
						return nil
					}
					cp.err = err
				} else {
					cp.raw = raw
					cp.env, cp.err = bundlefmt.ValidateEnvelope(raw, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindSlot,
						Epoch: uint64(id[0]), Seq: uint64(id[1]), CheckKey: true})
					if cp.err == nil && cp.env.ObjectSize != uint64(cp.size) {
						cp.err = fmt.Errorf("envelope says %d bytes, the object has %d", cp.env.ObjectSize, cp.size)
					}
				}
				if cp.err != nil {
					c.invariant(star, nil, key, "slot in bucket %s: %v", buckets[bi], cp.err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// checkRefRows checks a stream's refs from their rows alone.
func (c *checker) checkRefRows(star catalog.Star, s *streamState) {
	name := star.Star
	if len(s.refs) == 0 {
		if s.SettledThrough < s.NextRecord {
			c.invariant(name, s, "", "no refs, but records [%d, %d) are not settled", s.SettledThrough, s.NextRecord)
		}
		return
	}
	if first := s.refs[0].FirstRecord; first > s.SettledThrough {
		c.invariant(name, s, "", "refs start at %d, above settled_through %d", first, s.SettledThrough)
	}
	for i, ref := range s.refs {
		if ref.Star != name {
			c.invariant(name, s, "", "ref at %d names star %q", ref.FirstRecord, ref.Star)
		}
		if ref.Class != star.ChainClass {
			c.invariant(name, s, "", "ref at %d has class %q, the star's chain class is %q", ref.FirstRecord, ref.Class, star.ChainClass)
		}
		if i > 0 && ref.FirstRecord != s.refs[i-1].EndRecord() {
			c.invariant(name, s, "", "refs leave a gap or overlap at %d (previous ref ends at %d)", ref.FirstRecord, s.refs[i-1].EndRecord())
		}
		for j := 1; j < len(ref.Slots); j++ {
			a, b := ref.Slots[j-1], ref.Slots[j]
			if !(a.Epoch < b.Epoch || a.Epoch == b.Epoch && a.Seq < b.Seq) {
				c.invariant(name, s, "", "ref at %d names slots out of slot order: (%d, %d) then (%d, %d)", ref.FirstRecord, a.Epoch, a.Seq, b.Epoch, b.Seq)
			}
		}
	}
	if last := s.refs[len(s.refs)-1].EndRecord(); last != s.NextRecord {
		c.invariant(name, s, "", "refs end at %d, next_record is %d", last, s.NextRecord)
	}
}

// checkRefExtents checks that each ref's entries name chunks that cover
// its span exactly, in order (the extents come from the slots' footers).
func (c *checker) checkRefExtents(star string, s *streamState) {
	for i, ref := range s.refs {
		next := ref.FirstRecord
		for j, ex := range s.extents[i] {
			if ex.count == 0 {
				next = -1 // reported by the slot pass
				break
			}
			if ex.first != next {
				c.invariant(star, s, "", "ref at %d: entry %d's chunk starts at %d, want %d", ref.FirstRecord, j, ex.first, next)
			}
			next = ex.first + ex.count
		}
		if next >= 0 && next != ref.EndRecord() {
			c.invariant(star, s, "", "ref [%d, %d): its chunks end at %d", ref.FirstRecord, ref.EndRecord(), next)
		}
	}
}

// checkNamedSlot reads one slot that refs name: its footer against each
// naming entry's window, the chunk of each naming stream, and the records.
func (c *checker) checkNamedSlot(ctx context.Context, star string, buckets []string, content Content, si *slotInfo) error {
	key := bundlefmt.SlotKey(star, uint64(si.id.Epoch), uint64(si.id.Seq))
	bi, cp := si.first()
	if cp == nil || cp.env.Kind != bundlefmt.KindFlight {
		return nil // reported in the chain pass; its records count missing
	}
	order := append(buckets[bi:bi+1:bi+1], buckets[:bi]...) //nolint:gocritic // appendAssign: a new slice (the capacity is capped at one), buckets is not changed
	order = append(order, buckets[bi+1:]...)
	env := cp.env
	buf, size, err := c.read(ctx, order, key, int64(env.FooterOffset), int64(env.FooterLength)+bundlefmt.TrailerSize)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.mu.Lock()
	c.rep.SlotsRead++
	c.mu.Unlock()
	if err != nil {
		c.invariant(star, nil, key, "read the footer of a named slot: %v", err)
		return nil
	}
	f, err := bundlefmt.OpenFooter(key, env.FooterOffset, buf, uint64(size), bundlefmt.TransitBase)
	if err == nil {
		err = f.VerifyDirectory()
	}
	if err != nil {
		c.invariant(star, nil, key, "footer: %v", err)
		return nil
	}
	var jobs []chunkJob
	for _, a := range si.named {
		ref := a.s.refs[a.ref]
		sl := ref.Slots[a.entry]
		if sl.FooterOffset != int64(env.FooterOffset) || sl.FooterLength != int64(env.FooterLength) {
			c.invariant(star, a.s, key, "ref at %d: entry %d's footer window (%d, %d) is not the slot's (%d, %d)",
				ref.FirstRecord, a.entry, sl.FooterOffset, sl.FooterLength, env.FooterOffset, env.FooterLength)
		}
		lo, hi := f.FindStream(a.s.id)
		if hi-lo != 1 {
			c.invariant(star, a.s, key, "ref at %d names a slot with %d chunks of the stream", ref.FirstRecord, hi-lo)
			continue
		}
		v, err := f.EntryView(lo)
		if err != nil {
			c.invariant(star, a.s, key, "entry %d: %v", lo, err)
			continue
		}
		a.s.extents[a.ref][a.entry] = extent{first: int64(v.FirstRecord()), count: int64(v.Count())}
		jobs = append(jobs, chunkJob{view: v, off: f.DataOffset(lo), s: a.s, lo: ref.FirstRecord, hi: ref.EndRecord()})
	}
	if err := c.verifyData(ctx, star, order, key, jobs, NewGen(content), false); err != nil {
		return err
	}
	if len(buckets) > 1 {
		return c.compareCopies(ctx, star, buckets, key, size)
	}
	return nil
}

// compareCopies checks that every bucket holds the same bytes of an absorbed
// express slot (docs/metastore.md: a slot is absorbed only once it is in every
// bucket, so absorbed slots are identical everywhere), by the CRC-32C of
// each whole copy, read in windows.
func (c *checker) compareCopies(ctx context.Context, star string, buckets []string, key string, size int64) error {
	crcs := make([]uint32, len(buckets))
	for i, b := range buckets {
		var crc uint32
		for off := int64(0); off < size; off += readWindow {
			data, _, err := c.read(ctx, []string{b}, key, off, min(readWindow, size-off))
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				c.invariant(star, nil, key, "read the copy in bucket %s: %v", b, err)
				return nil
			}
			crc = crc32.Update(crc, castagnoli, data)
		}
		crcs[i] = crc
		if crc != crcs[0] {
			c.invariant(star, nil, key, "an absorbed slot's copies differ: CRC-32C 0x%08x in %s, 0x%08x in %s", crcs[0], buckets[0], crc, b)
		}
	}
	return nil
}
