package trim

import (
	"fmt"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Pos is a position in a star's chain (docs/metastore.md, slot order).
type Pos = catalog.SlotPos

// chain is a star's epochs as trim sees them: dense from the lowest, each
// past one with its end_seq once its fence finished. Every slot of the chain
// is enumerated from it, never by listing.
type chain struct {
	star   string
	class  string // the star's chain class: which buckets hold its slots
	lowest int64
	epochs []catalog.StarEpoch // epochs[i].Epoch == lowest + i
	head   Pos                 // the absorbed head (stars.epoch, stars.next_seq)
}

// newChain checks the star's epochs: at least one, dense, the last being the
// star's current epoch.
func newChain(star catalog.Star, epochs []catalog.StarEpoch) (chain, error) {
	c := chain{star: star.Star, class: star.ChainClass, epochs: epochs, head: Pos{Epoch: star.Epoch, Seq: star.NextSeq}}
	if len(epochs) == 0 {
		return c, cycle.Haltf("star %q has no epochs", star.Star)
	}
	c.lowest = epochs[0].Epoch
	for i, e := range epochs {
		if e.Epoch != c.lowest+int64(i) {
			return c, cycle.Haltf("star %q: epochs are not dense (%d after %d)", star.Star, e.Epoch, c.lowest+int64(i)-1)
		}
		if e.EndSeq != nil && *e.EndSeq < 0 {
			return c, cycle.Haltf("star %q: epoch %d has end_seq %d", star.Star, e.Epoch, *e.EndSeq)
		}
	}
	if last := epochs[len(epochs)-1].Epoch; last != star.Epoch {
		return c, cycle.Haltf("star %q: current epoch %d but last epoch row %d", star.Star, star.Epoch, last)
	}
	if e, ok := c.endSeq(c.head.Epoch); ok && c.head.Seq > e {
		return c, cycle.Haltf("star %q: head %s past the end %d of its epoch", star.Star, c.head, e)
	}
	return c, nil
}

// epoch returns epoch e's row, if the chain has it.
func (c chain) epoch(e int64) (catalog.StarEpoch, bool) {
	i := e - c.lowest
	if i < 0 || i >= int64(len(c.epochs)) {
		return catalog.StarEpoch{}, false
	}
	return c.epochs[i], true
}

// endSeq returns end_seq(e) when the epoch is known and ended.
func (c chain) endSeq(e int64) (int64, bool) {
	row, ok := c.epoch(e)
	if !ok || row.EndSeq == nil {
		return 0, false
	}
	return *row.EndSeq, true
}

// norm returns p's canonical form: (e, end_seq(e)) is (e+1, 0). A position
// before the lowest epoch or past the end of an ended epoch names no slot.
func (c chain) norm(p Pos) (Pos, error) {
	if p.Epoch < c.lowest || p.Seq < 0 {
		return p, fmt.Errorf("position %s of star %q is before its lowest epoch %d", p, c.star, c.lowest)
	}
	for {
		end, ok := c.endSeq(p.Epoch)
		if !ok || p.Seq < end {
			return p, nil
		}
		if p.Seq > end {
			return p, fmt.Errorf("position %s of star %q is past the end %d of epoch %d", p, c.star, end, p.Epoch)
		}
		p = Pos{Epoch: p.Epoch + 1}
	}
}

// slot checks that p names a slot that can exist: in a known epoch and,
// if that epoch ended, below its end_seq. A ref naming anything else is
// corrupt.
func (c chain) slot(p Pos) (Pos, error) {
	if _, ok := c.epoch(p.Epoch); !ok || p.Seq < 0 {
		return p, fmt.Errorf("slot %s of star %q is in no epoch of the star", p, c.star)
	}
	if end, ok := c.endSeq(p.Epoch); ok && p.Seq >= end {
		return p, fmt.Errorf("slot %s of star %q is at or past the end %d of its epoch", p, c.star, end)
	}
	return p, nil
}

// minPos returns the earlier of two normalised positions.
func minPos(a, b Pos) Pos {
	if b.Less(a) {
		return b
	}
	return a
}

// fenceWait returns the first past epoch whose fence is still in progress
// (no end_seq): trim releases nothing of it until its end_seq is set.
func (c chain) fenceWait() (catalog.StarEpoch, time.Time, bool) {
	for i, e := range c.epochs {
		if e.Epoch < c.head.Epoch && e.EndSeq == nil {
			// The fence began when the next epoch was inserted.
			return e, c.epochs[i+1].StartedAt, true
		}
	}
	return catalog.StarEpoch{}, time.Time{}, false
}

// span calls fn for each epoch's part [first, end) of the normalised range
// [from, to). Every epoch the range passes must have its end_seq: the trim
// bound never passes a fence in progress, so a range that does is corrupt.
func (c chain) span(from, to Pos, fn func(epoch, first, end int64) error) error {
	for e := from.Epoch; e <= to.Epoch; e++ {
		first, end := int64(0), to.Seq
		if e == from.Epoch {
			first = from.Seq
		}
		if e < to.Epoch {
			var ok bool
			if end, ok = c.endSeq(e); !ok {
				return cycle.Haltf("star %q: slot range %s..%s passes epoch %d, which has no end_seq", c.star, from, to, e)
			}
		}
		if first < end {
			if err := fn(e, first, end); err != nil {
				return err
			}
		}
	}
	return nil
}

// count is the number of slots in [from, to).
func (c chain) count(from, to Pos) (int64, error) {
	var n int64
	err := c.span(from, to, func(_, first, end int64) error {
		n += end - first
		return nil
	})
	return n, err
}

// batch is a run of consecutive slot keys and the position of its first.
type batch struct {
	first Pos
	keys  []string
}

// batches cuts the range [from, to) into runs of at most size slot keys, in
// slot order, and calls fn with each; fn's error stops the walk.
func (c chain) batches(from, to Pos, size int, fn func(batch) error) error {
	var cur batch
	err := c.span(from, to, func(epoch, first, end int64) error {
		for s := first; s < end; s++ {
			if len(cur.keys) == 0 {
				cur.first = Pos{Epoch: epoch, Seq: s}
				cur.keys = make([]string, 0, size)
			}
			cur.keys = append(cur.keys, bundlefmt.SlotKey(c.star, uint64(epoch), uint64(s)))
			if len(cur.keys) == size {
				if err := fn(cur); err != nil {
					return err
				}
				cur = batch{}
			}
		}
		return nil
	})
	if err != nil || len(cur.keys) == 0 {
		return err
	}
	return fn(cur)
}
