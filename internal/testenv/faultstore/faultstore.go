// Package faultstore is an objstore.Store that injects the faults a real
// object store and its SDK produce, for the seeded fault explorer
// (docs/architecture.md#the-fault-explorer): per request it may delay it,
// deliver it twice (the caller sees the second reply, as after an SDK
// retry), deliver it and lose the reply, fail it before it is sent, or
// deliver a DELETE again late (after a later write of one of its keys);
// listings may come in pages in another order or fail part way. It wraps
// either backend. Every decision is recorded with the request it hit, and
// a schedule of decisions replays: the same (operation, key, occurrence)
// takes the same fault, whatever the interleaving of other requests.
//
// It also watches create-once: every object a write through it leaves is
// read back and its CRC-32C kept; a key later found holding other bytes is
// an overwrite. It owns no decision of the auditor and is never built into
// the binary.
package faultstore

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nova/auditor/objstore"
)

// Kind is a fault.
type Kind string

// The faults.
const (
	Delay      Kind = "delay"       // the request waits 1-20 ms before it is sent
	Duplicate  Kind = "duplicate"   // sent twice; the caller sees the second reply (an SDK retry after a lost reply)
	LostReply  Kind = "lost-reply"  // sent and done; the caller sees a retryable timeout
	FailBefore Kind = "fail-before" // never sent; the caller sees a retryable error
	LateDelete Kind = "late-delete" // a DELETE done now and sent again late: after a later write of one of its keys, or at Flush
	LatePut    Kind = "late-put"    // a create-once PUT (or an assembly, as its one PUT) done now and sent again late: right after a later DELETE of its key (a stray)
	ListPaged  Kind = "list-paged"  // a listing delivered in pages of 1-3 objects, shuffled, with a pause between pages
	ListError  Kind = "list-error"  // a listing that fails part way, after some of its objects
)

// Kinds are every fault, in a fixed order (reports list them so).
var Kinds = []Kind{Delay, Duplicate, LostReply, FailBefore, LateDelete, LatePut, ListPaged, ListError}

// kindsOf are the faults that apply to an operation.
func kindsOf(op string) []Kind {
	switch op {
	case "List":
		return []Kind{Delay, FailBefore, ListPaged, ListError}
	case "Delete":
		return []Kind{Delay, Duplicate, LostReply, FailBefore, LateDelete}
	case "PutIfAbsent", "Assemble":
		return []Kind{Delay, Duplicate, LostReply, FailBefore, LatePut}
	}
	return []Kind{Delay, Duplicate, LostReply, FailBefore}
}

// Decision is one fault injected: the request's index in the run, its
// operation and key (a delete's first key; a listing's prefix), the
// occurrence of that (operation, key) pair, and the fault. Replays match on
// (Op, Key, Nth); Index is for reading.
type Decision struct {
	Index int64  `json:"index"`
	Op    string `json:"op"`
	Key   string `json:"key"`
	Nth   int    `json:"nth"`
	Kind  Kind   `json:"kind"`
	Arg   int    `json:"arg,omitempty"` // a delay's milliseconds, a listing's page seed or cut
}

type ident struct {
	op, key string
	nth     int
}

func (d Decision) ident() ident { return ident{d.Op, d.Key, d.Nth} }

// Config says how faults are drawn.
type Config struct {
	Seed uint64
	// Rate is the probability that a request gets a fault (0: none).
	Rate float64
	// Kinds are the faults drawn (nil: all).
	Kinds []Kind
	// LatePutPrefix: a late PUT is drawn only for keys under it (a key
	// that is deleted later: settled objects, not the marks), and then for
	// half of such a PUT's faults ("": any key, like the other kinds).
	LatePutPrefix string
}

// Injector draws (or replays) the faults and keeps the record and the
// create-once watch; Wrap makes a Store of it over a backend.
type Injector struct {
	mu        sync.Mutex
	rnd       *rand.Rand
	rate      float64
	lateput   string // Config.LatePutPrefix
	kinds     map[Kind]bool
	replay    map[ident]Decision // a replay: only these faults, where they match
	matched   map[ident]bool
	index     int64
	nth       map[[2]string]int
	decisions []Decision
	counts    map[Kind]int
	held      []held
	heldPuts  []heldPut
	skips     []skip            // the explorer's clock moves, oldest first: listings age by them
	crc       map[string]uint32 // bucket/key -> CRC-32C of the bytes first seen there
	problems  []string
	enabled   atomic.Bool
}

// skip is time the run skipped at a moment: every object written before
// then lists that much older.
type skip struct {
	at time.Time
	by time.Duration
}

// heldPut is a create-once PUT to be sent again late.
type heldPut struct {
	store       objstore.Store
	bucket, key string
	data        []byte
}

// held is a DELETE to be sent again late.
type held struct {
	store  objstore.Store
	bucket string
	keys   []string
}

// New is an injector drawing faults from cfg.Seed at cfg.Rate.
func New(cfg Config) *Injector {
	in := newInjector()
	in.rnd = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6661756c74)) // "fault"
	in.rate = cfg.Rate
	in.lateput = cfg.LatePutPrefix
	kinds := cfg.Kinds
	if kinds == nil {
		kinds = Kinds
	}
	for _, k := range kinds {
		in.kinds[k] = true
	}
	return in
}

// Replay is an injector that takes exactly the faults of schedule, each at
// the request with the same operation, key and occurrence, and no other,
// of the kinds the run draws at the time (SetKinds).
func Replay(schedule []Decision) *Injector {
	in := newInjector()
	for _, k := range Kinds {
		in.kinds[k] = true
	}
	in.replay = map[ident]Decision{}
	for _, d := range schedule {
		in.replay[d.ident()] = d
	}
	return in
}

func newInjector() *Injector {
	in := &Injector{kinds: map[Kind]bool{}, matched: map[ident]bool{}, nth: map[[2]string]int{},
		counts: map[Kind]int{}, crc: map[string]uint32{}}
	in.enabled.Store(true)
	return in
}

// SetEnabled turns fault injection on or off (off: requests pass through,
// still counted and watched). The explorer turns it off to quiesce.
func (in *Injector) SetEnabled(on bool) { in.enabled.Store(on) }

// Decisions are the faults injected so far, in request order.
func (in *Injector) Decisions() []Decision {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := slices.Clone(in.decisions)
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// Counts are the faults injected so far, by kind.
func (in *Injector) Counts() map[Kind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[Kind]int{}
	for k, n := range in.counts {
		out[k] = n
	}
	return out
}

// Requests is how many requests went through the injector.
func (in *Injector) Requests() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.index
}

// SetKinds draws only these faults from now on, a replay's included (the
// quiescing cycles keep the late DELETEs an SDK retry can send at any
// time).
func (in *Injector) SetKinds(kinds ...Kind) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.kinds = map[Kind]bool{}
	for _, k := range kinds {
		in.kinds[k] = true
	}
	if !in.kinds[LatePut] {
		in.heldPuts = nil // the faults stop: no stray lands from now on
	}
}

// Age makes every object written so far list d older (LastModified moved
// back), as if d had passed: the explorer skips the metastore's clock
// past the grace, and this skips the store's past the stray guard with it.
func (in *Injector) Age(d time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.skips = append(in.skips, skip{at: time.Now(), by: d})
}

// aged is o as listed after the skips: older by each skip made after it
// was written (surely after: a listing's LastModified may be truncated by
// up to objstore.ListedTimeResolution).
func (in *Injector) aged(o objstore.ObjectInfo) objstore.ObjectInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, s := range in.skips {
		if s.at.After(o.LastModified.Add(objstore.ListedTimeResolution)) {
			o.LastModified = o.LastModified.Add(-s.by)
		}
	}
	return o
}

// Matched is, for a replay, how many of the schedule's faults found their
// request, and how many the schedule holds.
func (in *Injector) Matched() (matched, scheduled int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.matched), len(in.replay)
}

// Problems are the create-once violations seen: a key found holding bytes
// other than those first seen there, or a late DELETE that removed an
// object written after it was first sent (reported for the oracle to
// weigh: it is harmless when nothing references the key).
func (in *Injector) Problems() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.problems)
}

// decide draws (or replays) the fault of one request.
func (in *Injector) decide(op, bucket, key string) (Decision, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.index++
	// The key alone: an episode's buckets may be named afresh each run
	// (S3), its keys are the same.
	k := [2]string{op, key}
	in.nth[k]++
	d := Decision{Index: in.index, Op: op, Key: key, Nth: in.nth[k]}
	if !in.enabled.Load() {
		return d, false
	}
	if in.replay != nil {
		// Only the kinds the run draws now: a request that comes later in
		// a replay than in its run (the quiescing cycles, which keep the
		// late DELETEs only) does not take the fault its run drew earlier.
		r, ok := in.replay[d.ident()]
		if !ok || !in.kinds[r.Kind] {
			return d, false
		}
		in.matched[d.ident()] = true
		d.Kind, d.Arg = r.Kind, r.Arg
	} else {
		rate := in.rate
		if op == "Delete" {
			// DELETEs are few and their faults matter most (a late one
			// is the hazard of docs/architecture.md#no-late-delete): they
			// draw at four times the rate.
			rate = min(4*rate, 0.6)
		}
		if rate <= 0 || in.rnd.Float64() >= rate {
			return d, false
		}
		var kinds []Kind
		for _, kd := range kindsOf(op) {
			if in.kinds[kd] && (kd != LatePut || strings.HasPrefix(key, in.lateput)) {
				kinds = append(kinds, kd)
			}
		}
		if len(kinds) == 0 {
			return d, false
		}
		d.Kind = kinds[in.rnd.IntN(len(kinds))]
		if op == "Delete" && in.kinds[LateDelete] && in.rnd.IntN(2) == 0 {
			d.Kind = LateDelete // half of a DELETE's faults are late
		}
		if (op == "PutIfAbsent" || op == "Assemble") && in.lateput != "" && slices.Contains(kinds, LatePut) && in.rnd.IntN(2) == 0 {
			d.Kind = LatePut // and half of a settled object's PUT's
		}
		d.Arg = 1 + in.rnd.IntN(20)
	}
	in.decisions = append(in.decisions, d)
	in.counts[d.Kind]++
	return d, true
}
