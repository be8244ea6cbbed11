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
	"context"
	"errors"
	"fmt"
	"hash/crc32"
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
// the request with the same operation, key and occurrence, and no other.
func Replay(schedule []Decision) *Injector {
	in := newInjector()
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

// SetKinds draws only these faults from now on (the quiescing cycles keep
// the late DELETEs an SDK retry can send at any time).
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
		r, ok := in.replay[d.ident()]
		if !ok {
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

// Gate stops one leader's requests for good when it "crashes": a request
// made through a gated store after Kill is never sent.
type Gate struct{ dead atomic.Bool }

// Kill closes the gate.
func (g *Gate) Kill() { g.dead.Store(true) }

// Dead reports whether the gate is closed.
func (g *Gate) Dead() bool { return g != nil && g.dead.Load() }

// ErrDead is the answer to a request made after the gate closed.
var ErrDead = errors.New("faultstore: the caller is dead, the request was never sent")

// transient is a retryable failure as a backend reports it.
func transient(op string, err error) error { return &objstore.TransientError{Op: op, Err: err} }

var (
	errInjected = errors.New("injected: connection reset before the request was sent")
	errTimeout  = fmt.Errorf("injected: the reply was lost: %w", context.DeadlineExceeded)
)

// Wrap is a Store over s whose requests take the injector's faults and,
// with a gate, stop when it is killed.
func (in *Injector) Wrap(s objstore.Store, g *Gate) objstore.Store {
	return &store{in: in, s: s, gate: g}
}

type store struct {
	in   *Injector
	s    objstore.Store
	gate *Gate
}

var _ objstore.Store = (*store)(nil)

// Limits are the wrapped store's part-planning limits.
func (f *store) Limits() objstore.Limits {
	if l, ok := f.s.(interface{ Limits() objstore.Limits }); ok {
		return l.Limits()
	}
	return objstore.DefaultLimits
}

// do runs one request under its fault: send it (once, twice, or not at
// all) and return the reply the caller sees.
func (f *store) do(ctx context.Context, op, bucket, key string, send func() error, late ...func()) error {
	if f.gate.Dead() {
		return ErrDead
	}
	d, faulty := f.in.decide(op, bucket, key)
	if !faulty {
		return send()
	}
	switch d.Kind {
	case LatePut:
		err := send()
		if err == nil {
			for _, fn := range late {
				fn()
			}
		}
		return err
	case Delay:
		t := time.NewTimer(time.Duration(d.Arg) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if f.gate.Dead() {
			return ErrDead
		}
		return send()
	case FailBefore:
		return transient(op, errInjected)
	case LostReply:
		_ = send()
		return transient(op, errTimeout)
	case Duplicate:
		_ = send()
		if f.gate.Dead() {
			return ErrDead
		}
		return send()
	}
	return send() // the kinds the operation handles itself
}

func (f *store) GetRange(ctx context.Context, bucket, key string, off, n int64) (data []byte, size int64, err error) {
	err = f.do(ctx, "GetRange", bucket, key, func() error {
		var e error
		data, size, e = f.s.GetRange(ctx, bucket, key, off, n)
		return e
	})
	return data, size, err
}

func (f *store) GetSuffix(ctx context.Context, bucket, key string, n int64) (data []byte, size int64, err error) {
	err = f.do(ctx, "GetSuffix", bucket, key, func() error {
		var e error
		data, size, e = f.s.GetSuffix(ctx, bucket, key, n)
		return e
	})
	return data, size, err
}

func (f *store) Head(ctx context.Context, bucket, key string) (a objstore.Attrs, err error) {
	err = f.do(ctx, "Head", bucket, key, func() error {
		var e error
		a, e = f.s.Head(ctx, bucket, key)
		return e
	})
	return a, err
}

func (f *store) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	return f.do(ctx, "PutIfAbsent", bucket, key, func() error {
		err := f.s.PutIfAbsent(ctx, bucket, key, data)
		if err == nil {
			f.in.written(ctx, f.s, bucket, key)
		}
		return err
	}, func() { f.in.late(f.s, bucket, key, data) })
}

// late holds a PUT the caller got its reply for, to be sent again right
// after the next DELETE of its key: an SDK retry that outlived the
// object's reap, which leaves a stray.
func (in *Injector) late(s objstore.Store, bucket, key string, data []byte) {
	in.mu.Lock()
	in.heldPuts = append(in.heldPuts, heldPut{store: s, bucket: bucket, key: key, data: slices.Clone(data)})
	in.mu.Unlock()
}

// deleted sends the held PUTs of the keys a DELETE removed.
func (in *Injector) deleted(ctx context.Context, bucket string, keys []string) {
	in.mu.Lock()
	var due []heldPut
	keep := in.heldPuts[:0]
	for _, h := range in.heldPuts {
		if h.bucket == bucket && slices.Contains(keys, h.key) {
			due = append(due, h)
			continue
		}
		keep = append(keep, h)
	}
	in.heldPuts = keep
	in.mu.Unlock()
	for _, h := range due {
		_ = h.store.PutIfAbsent(context.WithoutCancel(ctx), h.bucket, h.key, h.data) // a stray, or 412 if written again meanwhile
	}
}

func (f *store) Assemble(ctx context.Context, req objstore.AssembleRequest) (res objstore.AssembleResult, err error) {
	first := true
	err = f.do(ctx, "Assemble", req.Bucket, req.Key, func() error {
		r := req
		if !first {
			// The second delivery of a completed assembly: a complete sent
			// again onto the key its first copy took (ErrExists, with
			// the new upload left open for the caller to abort). It runs
			// no hooks: the caller's progress is the first copy's.
			r.UploadID, r.Stager, r.Hooks = "", nil, objstore.Hooks{}
		}
		first = false
		var e error
		res, e = f.s.Assemble(ctx, r)
		if e == nil {
			f.in.written(ctx, f.s, req.Bucket, req.Key)
		}
		return e
	}, func() {
		// The object's bytes, as the one PUT that wrote it would send
		// them again.
		a, err := f.s.Head(ctx, req.Bucket, req.Key)
		if err != nil {
			return
		}
		if data, _, err := f.s.GetRange(ctx, req.Bucket, req.Key, 0, a.Size); err == nil {
			f.in.late(f.s, req.Bucket, req.Key, data)
		}
	})
	return res, err
}

func (f *store) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	return f.do(ctx, "AbortAssembly", bucket, key, func() error { return f.s.AbortAssembly(ctx, bucket, key, uploadID) })
}

func (f *store) ListParts(ctx context.Context, bucket, key, uploadID string) (parts []objstore.PartInfo, err error) {
	err = f.do(ctx, "ListParts", bucket, key, func() error {
		var e error
		parts, e = f.s.ListParts(ctx, bucket, key, uploadID)
		return e
	})
	return parts, err
}

func (f *store) ListAssemblies(ctx context.Context, bucket, key string) (ids []string, err error) {
	err = f.do(ctx, "ListAssemblies", bucket, key, func() error {
		var e error
		ids, e = f.s.ListAssemblies(ctx, bucket, key)
		return e
	})
	return ids, err
}

func (f *store) Delete(ctx context.Context, bucket string, keys []string) error {
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	if f.gate.Dead() {
		return ErrDead
	}
	d, faulty := f.in.decide("Delete", bucket, first)
	send := func() error {
		err := f.s.Delete(ctx, bucket, keys)
		if err == nil {
			f.in.deleted(ctx, bucket, keys)
		}
		return err
	}
	if !faulty {
		return send()
	}
	switch d.Kind {
	case LateDelete:
		err := send()
		f.in.mu.Lock()
		f.in.held = append(f.in.held, held{store: f.s, bucket: bucket, keys: slices.Clone(keys)})
		f.in.mu.Unlock()
		return err
	case Delay:
		time.Sleep(time.Duration(d.Arg) * time.Millisecond)
		return send()
	case FailBefore:
		return transient("Delete", errInjected)
	case LostReply:
		_ = send()
		return transient("Delete", errTimeout)
	case Duplicate:
		_ = send()
		return send()
	}
	return send()
}

func (f *store) List(ctx context.Context, bucket, prefix string, each func(objstore.ObjectInfo) error) error {
	if f.gate.Dead() {
		return ErrDead
	}
	fn := func(o objstore.ObjectInfo) error { return each(f.in.aged(o)) }
	d, faulty := f.in.decide("List", bucket, prefix)
	if !faulty {
		return f.s.List(ctx, bucket, prefix, fn)
	}
	switch d.Kind {
	case Delay:
		time.Sleep(time.Duration(d.Arg) * time.Millisecond)
		return f.s.List(ctx, bucket, prefix, fn)
	case FailBefore:
		return transient("ListObjectsV2", errInjected)
	case ListError:
		n := 0
		err := f.s.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
			if n == d.Arg%4 {
				return transient("ListObjectsV2", errInjected)
			}
			n++
			return fn(o)
		})
		if err == nil && n <= d.Arg%4 {
			err = transient("ListObjectsV2", errInjected)
		}
		return err
	case ListPaged:
		var all []objstore.ObjectInfo
		if err := f.s.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
			all = append(all, o)
			return nil
		}); err != nil {
			return err
		}
		rnd := rand.New(rand.NewPCG(uint64(d.Arg), uint64(len(all))))
		rnd.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for i, o := range all {
			if i > 0 && rnd.IntN(3) == 0 {
				time.Sleep(time.Millisecond) // a page boundary: the store may change meanwhile
			}
			if err := fn(o); err != nil {
				return err
			}
		}
		return nil
	}
	return f.s.List(ctx, bucket, prefix, fn)
}

// written records the bytes a write left at bucket/key and sends the late
// DELETEs held for that key.
func (in *Injector) written(ctx context.Context, s objstore.Store, bucket, key string) {
	in.watch(ctx, s, bucket, key)
	in.mu.Lock()
	var due []held
	keep := in.held[:0]
	for _, h := range in.held {
		if h.bucket == bucket && slices.Contains(h.keys, key) {
			due = append(due, h)
			continue
		}
		keep = append(keep, h)
	}
	in.held = keep
	in.mu.Unlock()
	for _, h := range due {
		if err := h.store.Delete(context.WithoutCancel(ctx), h.bucket, h.keys); err == nil {
			in.problem(fmt.Sprintf("a late DELETE removed %s/%s after it was written again", bucket, key))
		}
	}
}

// Flush sends every DELETE still held, late: after everything the run did
// since it was first sent.
func (in *Injector) Flush(ctx context.Context) error {
	in.mu.Lock()
	due := in.held
	in.held = nil
	in.mu.Unlock()
	var errs []error
	for _, h := range due {
		errs = append(errs, h.store.Delete(ctx, h.bucket, h.keys))
	}
	return errors.Join(errs...)
}

// watch reads the object at bucket/key back and compares its CRC with the
// one first seen there.
func (in *Injector) watch(ctx context.Context, s objstore.Store, bucket, key string) {
	ctx = context.WithoutCancel(ctx)
	a, err := s.Head(ctx, bucket, key)
	if err != nil || a.Size == 0 {
		return
	}
	b, _, err := s.GetRange(ctx, bucket, key, 0, a.Size)
	if err != nil {
		return
	}
	c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	in.mu.Lock()
	defer in.mu.Unlock()
	k := bucket + "/" + key
	if old, ok := in.crc[k]; ok && old != c {
		in.problems = append(in.problems, fmt.Sprintf("overwrite: %s holds other bytes than first written there", k))
	}
	if _, ok := in.crc[k]; !ok {
		in.crc[k] = c
	}
}

// Watch checks bucket/key against the bytes first seen there (the oracle
// calls it for every object it finds).
func (in *Injector) Watch(ctx context.Context, s objstore.Store, bucket, key string) {
	in.watch(ctx, s, bucket, key)
}

func (in *Injector) problem(p string) {
	in.mu.Lock()
	in.problems = append(in.problems, p)
	in.mu.Unlock()
}

// Forget drops what the watch knows of bucket/key: the explorer damaged
// it on purpose, and its next bytes are not an overwrite.
func (in *Injector) Forget(bucket, key string) {
	in.mu.Lock()
	delete(in.crc, bucket+"/"+key)
	in.mu.Unlock()
}
