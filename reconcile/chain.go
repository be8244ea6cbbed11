package reconcile

import (
	"sort"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
)

// object is one settled object the stream's prefix holds, as its footer
// says (its bytes are checked only before it is cataloged: verified).
type object struct {
	key      string
	first    uint64
	revision uint32
	end      uint64 // one past its last record
	entries  []bundlefmt.Entry
	size     uint64
	footOff  uint64
	footLen  uint64
	// eligible: the object may be cataloged. It is the cataloged key, or
	// an open publish intent names it, or its revision is above every
	// revision the metastore knows its base used (the store is ahead of
	// the metastore there). A key at or below the high-water that nothing
	// names was given up (buried) and may be deleted at any time: never.
	eligible bool
	// reaping: a reap intent names the key (it was found dead).
	reaping  bool
	verified bool // every chunk's bytes read and checked against its DataCRC
	bad      bool // failed that check: never cataloged
}

// catalogEntry is the catalog row describing o.
func (o *object) catalogEntry(st catalog.Stream) catalog.Entry {
	e := catalog.Entry{Stream: st.ID, Epoch: st.Epoch, FirstRecord: int64(o.first), Revision: int32(o.revision),
		RecordCount: int64(o.end - o.first), ObjectBytes: int64(o.size), FooterOffset: int64(o.footOff),
		FooterLength: int64(o.footLen), Class: catalog.ClassStandard}
	e.MinTimestamp, e.MaxTimestamp = bundlefmt.TimestampRange(o.entries)
	return e
}

// link is one entry of the chain reconcile catalogs: an object the store
// holds, a cut of one at next_record, or a catalog entry kept as it is
// (no object found to replace it).
type link struct {
	obj  *object        // the object cataloged (for a cut: the object cut)
	cut  bool           // the object is cut at next_record: a new object
	kept *catalog.Entry // the metastore's entry, kept
}

// chain is what a stream's catalog should be, from the store.
type chain struct {
	links []link
	end   uint64 // the new settled_through
	// lostLead are the records [from, to) at the stream's start whose
	// entries name objects the store no longer holds, with nothing else
	// holding them: dropped from the catalog (the report tells the part
	// below low_record, retired, from the part lost).
	lostLead *span
	// lostKept are entries kept with no object standing for them.
	lostKept []span
}

type span struct{ from, to uint64 }

// plan chooses the stream's chain (pure): from the first record the
// catalog covers (its first entry, else settled_through), at each key base
// the eligible, sound object that reaches furthest toward limit
// (next_record, or lower where the store's bytes disagree with a slot's)
// (ties: the highest revision); a reach past limit is cut there. At
// settled_through, where retention left a gap, a run may start above it,
// up to low_record, as settle's does.
// Where no object starts at a base below settled_through, the catalog's
// entry there is kept (its records are reported lost when its object is
// gone, retired below low_record); past settled_through the chain simply ends, and the refs hold
// the rest. Leading entries whose objects are all gone, and that no
// object continues, are dropped: nothing holds their records.
func plan(st catalog.Stream, entries []catalog.Entry, byBase map[uint64][]*object, present map[string]bool, limit uint64) chain {
	next, settled, low := limit, uint64(st.SettledThrough), uint64(max(st.LowRecord, 0))
	start := settled
	if len(entries) > 0 {
		start = uint64(entries[0].FirstRecord)
	}
	entryAt := map[uint64]*catalog.Entry{}
	for i := range entries {
		entryAt[uint64(entries[i].FirstRecord)] = &entries[i]
	}
	memo := map[uint64]uint64{}
	var reach func(p uint64) uint64
	reach = func(p uint64) uint64 {
		if p >= next {
			return next
		}
		if r, ok := memo[p]; ok {
			return r
		}
		best := p
		if c := pick(p, byBase[p], reach, next); c != nil {
			best = next
			if c.end < next {
				best = max(c.end, reach(c.end))
			}
		}
		memo[p] = best
		return best
	}
	var c chain
	p := start
	// Leading entries with no object left: dropped while nothing starts
	// at their base and they name a missing key.
	for p < settled {
		e := entryAt[p]
		if e == nil || pick(p, byBase[p], reach, next) != nil || present[entryKeyOf(st, *e)] {
			break
		}
		if c.lostLead == nil {
			c.lostLead = &span{from: p}
		}
		p = uint64(e.EndRecord())
		c.lostLead.to = p
	}
	for p < next {
		o := pick(p, byBase[p], reach, next)
		if o == nil && p >= settled && p < low {
			// A run settle began in the retention gap: the first base up
			// to low_record that starts a chain (the records before it
			// are dead).
			for _, b := range sortedBases(byBase) {
				if b <= p || b > low || b >= next {
					continue
				}
				if o = pick(b, byBase[b], reach, next); o != nil {
					p = b
					break
				}
			}
		}
		if o == nil {
			e := entryAt[p]
			if e == nil || p >= settled {
				break
			}
			if !present[entryKeyOf(st, *e)] {
				c.lostKept = append(c.lostKept, span{p, uint64(e.EndRecord())})
			}
			c.links = append(c.links, link{kept: e})
			p = uint64(e.EndRecord())
			continue
		}
		if o.end > next {
			c.links = append(c.links, link{obj: o, cut: true})
			p = next
			break
		}
		c.links = append(c.links, link{obj: o})
		p = o.end
	}
	c.end = max(p, settled)
	return c
}

// pick is the candidate at base p that reaches furthest (ties: the highest
// revision), or nil.
func pick(p uint64, cands []*object, reach func(uint64) uint64, next uint64) *object {
	var best *object
	var bestReach uint64
	for _, o := range cands {
		if !o.eligible || o.bad || o.reaping {
			continue
		}
		r := next
		if o.end < next {
			r = max(o.end, reach(o.end))
		}
		if best == nil || r > bestReach || r == bestReach && o.revision > best.revision {
			best, bestReach = o, r
		}
	}
	return best
}

func entryKeyOf(st catalog.Stream, e catalog.Entry) string {
	return bundlefmt.SettledKey(st.Bucket, st.ID, uint64(e.Epoch), uint64(e.FirstRecord), uint32(e.Revision))
}

// sortedBases are the key bases of byBase in record order.
func sortedBases(byBase map[uint64][]*object) []uint64 {
	out := make([]uint64, 0, len(byBase))
	for b := range byBase {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// sortObjects orders each base's objects by revision, highest first.
func sortObjects(byBase map[uint64][]*object) {
	for _, os := range byBase {
		sort.Slice(os, func(i, j int) bool { return os[i].revision > os[j].revision })
	}
}
