package bundle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// counting counts the store's ranged reads, to hold the footer cache to
// one envelope and one footer GET per slot.
type counting struct {
	objstore.Store
	mu   sync.Mutex
	gets map[string]int
}

func (c *counting) GetRange(ctx context.Context, b, k string, off, n int64) ([]byte, int64, error) {
	c.mu.Lock()
	c.gets[k]++
	c.mu.Unlock()
	return c.Store.GetRange(ctx, b, k, off, n)
}

type fixture struct {
	ctx   context.Context
	fs    objstore.Store
	std   string // the standard bucket
	store *counting
	rd    *bundle.Reader
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b := teststore.File(t, teststore.Options{})
	c := &counting{Store: b.Store, gets: map[string]int{}}
	top, err := bundle.Topology(c, b.Std, nil, "", "--s3-express-buckets", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: context.Background(), fs: b.Store, std: b.Std, store: c, rd: bundle.NewReader(top)}
}

var stream = bundlefmt.StreamID{15: 7}

func chunk(t *testing.T, first uint64, n int) bundlefmt.Chunk {
	t.Helper()
	b := bundlefmt.NewChunkBuilder(stream, first)
	for i := range n {
		if err := b.Add(bundlefmt.Record{Body: []byte(fmt.Sprintf("record %d", first+uint64(i)))}, int64(first)+int64(i), i == n-1); err != nil {
			t.Fatal(err)
		}
	}
	return b.Chunk()
}

func (f *fixture) put(t *testing.T, key string, obj []byte) {
	t.Helper()
	if err := f.fs.PutIfAbsent(f.ctx, f.std, key, obj); err != nil {
		t.Fatal(err)
	}
}

// slot stores a flight of one chunk at its key and returns the key and
// the footer window a ref names.
func (f *fixture) slot(t *testing.T, seq uint64) (string, int64, int64) {
	t.Helper()
	obj, err := bundlefmt.EncodeFlight(1, seq, 42, []bundlefmt.Chunk{chunk(t, 0, 5)})
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SlotKey("s1", 1, seq)
	f.put(t, key, obj)
	env, err := bundlefmt.DecodeEnvelope(key, obj[:bundlefmt.EnvelopeSize])
	if err != nil {
		t.Fatal(err)
	}
	return key, int64(env.FooterOffset), int64(env.FooterLength)
}

func quarantineClass(err error) string {
	if q, ok := cycle.AsQuarantine(err); ok {
		return q.Class
	}
	return ""
}

func TestSlotFooterReadsOnceAndChecksTheWindow(t *testing.T) {
	f := newFixture(t)
	key, off, length := f.slot(t, 3)
	rd := f.rd.WithFooterCache(1 << 20)
	var wg sync.WaitGroup
	for range 8 { // eight streams of one slot, at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			ft, err := rd.SlotFooter(f.ctx, catalog.ClassStandard, key, off, length)
			if err != nil || ft.NumChunks() != 1 {
				t.Errorf("slot footer: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := f.store.gets[key]; got != 2 {
		t.Errorf("%d GETs of the slot for eight readers: want 2 (envelope, footer)", got)
	}
	if gets, bytes := rd.FooterReads(); gets != 1 || bytes <= bundlefmt.EnvelopeSize {
		t.Errorf("FooterReads = %d, %d", gets, bytes)
	}
	if _, err := rd.SlotFooter(f.ctx, catalog.ClassStandard, key, off, length+1); quarantineClass(err) != cycle.ClassCorrupt {
		t.Errorf("a ref disagreeing on the window: %v, want a corrupt quarantine", err)
	}
	// Without the cache, a ref whose window the envelope does not give.
	if _, err := f.rd.SlotFooter(f.ctx, catalog.ClassStandard, key, off+1, length); quarantineClass(err) != cycle.ClassCorrupt {
		t.Errorf("a window the envelope does not give: %v", err)
	}
}

// TestFooterCacheOutlivesItsReaders holds the cache shared across cycles
// (and a fleet member's stars) to what makes that safe: a later cycle's
// reader reads nothing for a slot held and counts only its own reads, the
// window is still checked, the budget evicts least recently used first,
// and a slot reaped after its footer was cached is still found missing
// when its bytes are read.
func TestFooterCacheOutlivesItsReaders(t *testing.T) {
	f := newFixture(t)
	k3, off3, len3 := f.slot(t, 3)
	k4, off4, len4 := f.slot(t, 4)
	cache := bundle.NewFooterCache(1 << 20)

	first := f.rd.WithFooters(cache) // cycle 1 reads both slots
	for _, s := range []struct {
		key      string
		off, len int64
	}{{k3, off3, len3}, {k4, off4, len4}} {
		if _, err := first.SlotFooter(f.ctx, catalog.ClassStandard, s.key, s.off, s.len); err != nil {
			t.Fatal(err)
		}
	}
	if gets, _ := first.FooterReads(); gets != 2 {
		t.Fatalf("cycle 1 FooterReads = %d, want 2", gets)
	}
	held := cache.Bytes()
	if held <= 0 {
		t.Fatalf("the cache holds %d bytes after two footers", held)
	}

	second := f.rd.WithFooters(cache) // cycle 2: nothing to read
	ft, err := second.SlotFooter(f.ctx, catalog.ClassStandard, k3, off3, len3)
	if err != nil || ft.NumChunks() != 1 {
		t.Fatalf("cycle 2 slot footer: %v", err)
	}
	if gets, bytes := second.FooterReads(); gets != 0 || bytes != 0 {
		t.Errorf("cycle 2 FooterReads = %d, %d: want none, the footer is held", gets, bytes)
	}
	if f.store.gets[k3] != 2 {
		t.Errorf("%d GETs of %s over two cycles: want 2 (envelope, footer, once)", f.store.gets[k3], k3)
	}
	if _, err := second.SlotFooter(f.ctx, catalog.ClassStandard, k3, off3, len3+1); quarantineClass(err) != cycle.ClassCorrupt {
		t.Errorf("a later ref disagreeing on the window: %v, want a corrupt quarantine", err)
	}
	// The same key in another class is another slot: read afresh (and
	// here missing: the express class has no buckets in this topology).
	if _, err := second.SlotFooter(f.ctx, catalog.ClassExpress, k3, off3, len3); err == nil {
		t.Errorf("the express class's %s came from the standard one's cached footer", k3)
	}

	// The slot is reaped: its footer stays cached, its bytes are gone, and
	// reading them says so (a quarantine naming the slot, as for any
	// missing slot), never a stale chunk.
	if err := f.fs.Delete(f.ctx, f.std, []string{k3}); err != nil {
		t.Fatal(err)
	}
	if _, err := second.SlotFooter(f.ctx, catalog.ClassStandard, k3, off3, len3); err != nil {
		t.Fatalf("cached footer of a reaped slot: %v", err)
	}
	ft3, _ := second.SlotFooter(f.ctx, catalog.ClassStandard, k3, off3, len3)
	e, err := ft3.Entry(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Chunk(f.ctx, bundle.Source{Key: k3, Class: catalog.ClassStandard}, e); quarantineClass(err) != cycle.ClassMissing {
		t.Errorf("a chunk of the reaped slot: %v, want a missing quarantine", err)
	}

	// A budget of one footer: k4 (least recently used) goes when k3 comes
	// back; the last footer read is kept even alone over the budget.
	small := bundle.NewFooterCache(held/2 + 1)
	rd := f.rd.WithFooters(small)
	k5, off5, len5 := f.slot(t, 6)
	for _, s := range []struct {
		key      string
		off, len int64
	}{{k4, off4, len4}, {k5, off5, len5}, {k5, off5, len5}, {k4, off4, len4}} {
		if _, err := rd.SlotFooter(f.ctx, catalog.ClassStandard, s.key, s.off, s.len); err != nil {
			t.Fatal(err)
		}
	}
	if gets, _ := rd.FooterReads(); gets != 3 {
		t.Errorf("FooterReads over a one-footer budget = %d, want 3 (k4, k5, k4 again)", gets)
	}
	if got := small.Bytes(); got > held/2+1 {
		t.Errorf("the cache holds %d bytes over a budget of %d", got, held/2+1)
	}
}

func TestSlotFooterClassifiesDataErrors(t *testing.T) {
	f := newFixture(t)
	key, off, length := f.slot(t, 4)
	if _, err := f.rd.SlotFooter(f.ctx, catalog.ClassStandard, bundlefmt.SlotKey("s1", 1, 99), off, length); quarantineClass(err) != cycle.ClassMissing {
		t.Errorf("a missing slot: %v, want a missing quarantine", err)
	}
	// A slot stored under another slot's key: its envelope names seq 4.
	obj, _, err := f.fs.GetRange(f.ctx, f.std, key, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	other := bundlefmt.SlotKey("s1", 1, 5)
	f.put(t, other, obj)
	if _, err := f.rd.SlotFooter(f.ctx, catalog.ClassStandard, other, off, length); quarantineClass(err) == "" {
		t.Errorf("a slot under the wrong key: %v, want a quarantine", err)
	}
	// A flipped trailer byte: the trailer's CRC.
	bad := append([]byte(nil), obj...)
	bad[len(bad)-3] ^= 0xff
	flipped := bundlefmt.SlotKey("s1", 1, 6)
	env, _ := bundlefmt.EncodeFlight(1, 6, 42, []bundlefmt.Chunk{chunk(t, 0, 5)})
	copy(bad[:bundlefmt.EnvelopeSize], env[:bundlefmt.EnvelopeSize])
	f.put(t, flipped, bad)
	if _, err := f.rd.SlotFooter(f.ctx, catalog.ClassStandard, flipped, off, length); quarantineClass(err) == "" {
		t.Errorf("a damaged trailer: %v, want a quarantine", err)
	}
	// A class with no buckets is not the data's fault: no quarantine.
	if _, err := f.rd.SlotFooter(f.ctx, catalog.ClassExpress, key, off, length); err == nil || quarantineClass(err) != "" {
		t.Errorf("an unconfigured class: %v, want a plain error", err)
	}
}

func TestSettledObjectReads(t *testing.T) {
	f := newFixture(t)
	c := chunk(t, 10, 4)
	obj, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{c})
	if err != nil {
		t.Fatal(err)
	}
	e := catalog.Entry{Stream: stream, Epoch: 2, FirstRecord: 10, Revision: 1, RecordCount: 4}
	key := bundle.EntryKey("b", e)
	if want := bundlefmt.SettledKey("b", stream, 2, 10, 1); key != want {
		t.Fatalf("EntryKey = %s, want %s", key, want)
	}
	f.put(t, key, obj)

	ft, err := f.rd.StandingFooter(f.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if int(ft.ObjectSize()) != len(obj) {
		t.Errorf("standing footer: object size %d, want %d", ft.ObjectSize(), len(obj))
	}
	ef, err := f.rd.EntryFooter(f.ctx, key, int64(ft.FooterOffset()), int64(ft.FooterLength()))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ef.Entries()
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries: %v %v", entries, err)
	}
	data, err := f.rd.Chunk(f.ctx, bundle.Settled(key), entries[0])
	if err != nil || len(data) != len(c.Data) {
		t.Fatalf("chunk: %d bytes, %v", len(data), err)
	}
	wrong := entries[0]
	wrong.DataCRC ^= 1
	if _, err := f.rd.Chunk(f.ctx, bundle.Settled(key), wrong); quarantineClass(err) != cycle.ClassChecksum {
		t.Errorf("a chunk whose bytes disagree with its DataCRC: %v, want a checksum quarantine", err)
	}

	// The catalog references the key: its absence halts.
	gone := bundle.EntryKey("b", catalog.Entry{Stream: stream, Epoch: 2, FirstRecord: 99})
	if _, err := f.rd.EntryFooter(f.ctx, gone, int64(ft.FooterOffset()), int64(ft.FooterLength())); !cycle.IsHalt(err) {
		t.Errorf("a cataloged object missing: %v, want a halt", err)
	}
	// Nothing references a standing object: its absence is the store's error.
	if _, err := f.rd.StandingFooter(f.ctx, gone); !errors.Is(err, objstore.ErrNotFound) || quarantineClass(err) != "" {
		t.Errorf("a standing object missing: %v, want ErrNotFound unclassified", err)
	}
	// Whole reads, for verify and inspect.
	whole, size, err := f.rd.Object(f.ctx, key, int64(len(obj)))
	if err != nil || size != int64(len(obj)) || len(whole) != len(obj) {
		t.Errorf("Object: %d of %d bytes, %v", len(whole), size, err)
	}
	if b, got, err := f.rd.Find(f.ctx, key); err != nil || b != f.std || len(got) != len(obj) {
		t.Errorf("Find: %s %d %v", b, len(got), err)
	}
	if _, _, err := f.rd.Find(f.ctx, gone); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Find of a missing key: %v", err)
	}
}

// stalling is a store whose first ranged read blocks until its caller's
// context ends.
type stalling struct {
	objstore.Store
	once    sync.Once
	started chan struct{}
}

func (s *stalling) GetRange(ctx context.Context, b, k string, off, n int64) ([]byte, int64, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.started)
		<-ctx.Done()
		return nil, 0, ctx.Err()
	}
	return s.Store.GetRange(ctx, b, k, off, n)
}

// TestFooterCacheWaiterOutlivesACancelledFetch: a caller waiting for a
// footer another caller is fetching, whose context then ends (its cycle
// over: the cache outlives it), fetches the footer itself rather than
// failing with the other's cancellation.
func TestFooterCacheWaiterOutlivesACancelledFetch(t *testing.T) {
	f := newFixture(t)
	key, off, length := f.slot(t, 3)
	st := &stalling{Store: f.fs, started: make(chan struct{})}
	top, err := bundle.Topology(st, f.std, nil, "", "--s3-express-buckets", nil)
	if err != nil {
		t.Fatal(err)
	}
	cache := bundle.NewFooterCache(1 << 20)
	old := bundle.NewReader(top).WithFooters(cache)
	cctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := old.SlotFooter(cctx, catalog.ClassStandard, key, off, length)
		done <- err
	}()
	<-st.started // the old cycle's fetch is under way
	waiter := make(chan error, 1)
	next := bundle.NewReader(top).WithFooters(cache)
	go func() {
		ft, err := next.SlotFooter(f.ctx, catalog.ClassStandard, key, off, length)
		if err == nil && ft.NumChunks() != 1 {
			err = fmt.Errorf("%d chunks", ft.NumChunks())
		}
		waiter <- err
	}()
	time.Sleep(50 * time.Millisecond) // the waiter waits on the fetch in flight
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled caller: %v, want context.Canceled", err)
	}
	if err := <-waiter; err != nil {
		t.Errorf("the waiter, its context live: %v, want the footer", err)
	}
	if gets, _ := next.FooterReads(); gets != 1 {
		t.Errorf("the waiter's FooterReads = %d, want 1 (it fetched for itself)", gets)
	}
}

// gated is a store whose first ranged read waits for release.
type gated struct {
	objstore.Store
	once             sync.Once
	started, release chan struct{}
}

func (s *gated) GetRange(ctx context.Context, b, k string, off, n int64) ([]byte, int64, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.started)
		<-s.release
	}
	return s.Store.GetRange(ctx, b, k, off, n)
}

// TestFooterCacheWaiterOutlivesAnotherRefsBadWindow: a caller waiting for
// a footer that another caller is fetching through a broken ref (a window
// the envelope disagrees with) is not failed with that ref's corruption:
// it fetches through its own window and gets the footer. One stream's bad
// ref must not quarantine the other streams of the slot.
func TestFooterCacheWaiterOutlivesAnotherRefsBadWindow(t *testing.T) {
	f := newFixture(t)
	key, off, length := f.slot(t, 3)
	st := &gated{Store: f.fs, started: make(chan struct{}), release: make(chan struct{})}
	top, err := bundle.Topology(st, f.std, nil, "", "--s3-express-buckets", nil)
	if err != nil {
		t.Fatal(err)
	}
	cache := bundle.NewFooterCache(1 << 20)
	bad := make(chan error, 1)
	go func() {
		_, err := bundle.NewReader(top).WithFooters(cache).SlotFooter(f.ctx, catalog.ClassStandard, key, off+1, length)
		bad <- err
	}()
	<-st.started // the broken ref's fetch is under way
	waiter := make(chan error, 1)
	go func() {
		ft, err := bundle.NewReader(top).WithFooters(cache).SlotFooter(f.ctx, catalog.ClassStandard, key, off, length)
		if err == nil && ft.NumChunks() != 1 {
			err = fmt.Errorf("%d chunks", ft.NumChunks())
		}
		waiter <- err
	}()
	time.Sleep(50 * time.Millisecond) // the waiter waits on the fetch in flight
	close(st.release)
	if _, ok := cycle.AsQuarantine(<-bad); !ok {
		t.Error("the broken ref's caller: no quarantine")
	}
	if err := <-waiter; err != nil {
		t.Errorf("the waiter, its window right: %v, want the footer", err)
	}
}
