package sim

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// Takeover says how a Write call becomes the star's writer.
type Takeover int

const (
	// TakeoverAuto fences the star's current epoch (docs/metastore.md, fencing)
	// unless the star is pristine: epoch 1, head 0 and no slot in its first
	// fence window. It is what a restarted writer does.
	TakeoverAuto Takeover = iota
	// TakeoverAlways fences the current epoch first.
	TakeoverAlways
	// TakeoverNever writes at the star's current epoch from its head without
	// fencing: a stale writer, for race tests.
	TakeoverNever
)

// Faults are per-flight probabilities of the write path's failures.
type Faults struct {
	// Failover: a new writer fences this one (epoch bump, poison run of
	// fence_window seqs, end_seq) while its PUTs are in flight; the old
	// writer stops on a 412 that is not its own or on its next absorb, and
	// the new one carries on.
	Failover float64
	// Lost: the flight is written but never absorbed; its records go again
	// in the next flight.
	Lost float64
	// Crash: the writer dies after the flight's PUT, before absorbing it; a
	// new writer session fences and carries on.
	Crash float64
	// LostReply: the PUT lands but its reply is lost; the writer reads the
	// slot back, knows it by its nonce and absorbs it once.
	LostReply float64
	// Erase: once the flight is absorbed, an erasure of 1 to 4 of its
	// records (of one stream, drawn at random) is recorded, as a user's
	// erasure request during traffic (erase.go).
	Erase float64
}

// WriteOptions says what Write does. Flights, Bytes and Duration bound the
// run (the first reached ends it); with none set it runs until Stop is
// closed or ctx ends.
type WriteOptions struct {
	Star           string
	Flights        int64         // stop after this many flights are written
	Bytes          int64         // stop after this many flight bytes are written
	Duration       time.Duration // stop after this long
	FlightInterval time.Duration // a flight is flushed at least this often (default 200ms)
	FlightBytes    int64         // or as soon as it holds this many bytes (default 1 MiB)
	AbsorbFlights  int           // flights per absorb transaction (default 4)
	MaxBatch       int           // producer batch size of the hottest stream, in records (default 32)
	Rate           int64         // producer content bytes per second (0: as fast as possible)
	Faults         Faults
	// RetentionEvery, when set, raises the low_record of a random stream
	// this often while writing (the write path's retention; see retention).
	RetentionEvery time.Duration
	Takeover       Takeover
	Stop           <-chan struct{}  // closed: stop producing, absorb what was written, return
	Progress       func(WriteStats) // called about once a second, and once at the end
	RecordSlots    bool             // list every slot written in WriteStats.Slots (for tests)
	Session        uint64           // salt of the traffic's random source (runs with equal salts repeat)
	Logger         *slog.Logger
	// BeforeAbsorbCommit, when set, runs inside every absorb transaction
	// just before it commits, with the flights' stream rows locked (tests
	// hold an absorb open across an auditor step with it).
	BeforeAbsorbCommit func(context.Context) error
}

func (o *WriteOptions) defaults() error {
	if o.FlightInterval == 0 {
		o.FlightInterval = 200 * time.Millisecond
	}
	if o.FlightBytes == 0 {
		o.FlightBytes = 1 << 20
	}
	if o.AbsorbFlights == 0 {
		o.AbsorbFlights = 4
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 32
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if o.FlightInterval < 0 || o.FlightBytes < 1 || o.FlightBytes > bundlefmt.MaxFlightSize/2 {
		errs = append(errs, fmt.Errorf("flight-interval %s / flight-bytes %d out of range", o.FlightInterval, o.FlightBytes))
	}
	if o.AbsorbFlights < 1 || o.MaxBatch < 1 || o.Flights < 0 || o.Bytes < 0 || o.Duration < 0 || o.Rate < 0 || o.RetentionEvery < 0 {
		errs = append(errs, errors.New("absorb-flights, max-batch must be positive; flights, bytes, duration, rate, retention-every not negative"))
	}
	for name, p := range map[string]float64{"fail-failover": o.Faults.Failover, "fail-lost": o.Faults.Lost,
		"fail-crash": o.Faults.Crash, "fail-lost-reply": o.Faults.LostReply, "erase-rate": o.Faults.Erase} {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s: %v outside [0, 1]", name, p))
		}
	}
	return errors.Join(errs...)
}

// WriteStats counts what a Write did.
type WriteStats struct {
	Star         string
	Flights      int64 // flights written (their PUT succeeded), absorbed or not
	FlightBytes  int64 // bytes of those flights (one copy)
	Absorbed     int64 // flights absorbed
	Records      int64 // records absorbed
	ContentBytes int64 // content bytes of those records
	AbsorbTxs    int64 // absorb transactions committed
	Unabsorbed   int64 // flights written and never absorbed: lost flights in the chain
	Poisons      int64 // poison slots written by this writer's fences
	Fences       int64 // epochs this writer fenced (takeovers, failovers, crash recoveries)
	Failovers    int64 // failover faults played
	Crashes      int64 // crash faults played
	LostFaults   int64 // lost-flight faults played
	LostReplies  int64 // lost-reply faults played
	Retention    int64 // low_record raises (WriteOptions.RetentionEvery)
	Erasures     int64 // erasures recorded by the erasure fault (Faults.Erase)
	Erased       int64 // records those erasures cover
	Epoch        int64 // the writer's epoch at the end
	Elapsed      time.Duration
	PutTime      time.Duration // summed over slot PUTs (several run at once)
	AbsorbTime   time.Duration // summed over absorb transactions (one at a time)
	Slots        []SlotOutcome // with RecordSlots: every slot this writer wrote, in slot order
}

// SlotOutcome is one slot a writer wrote.
type SlotOutcome struct {
	Epoch, Seq int64
	Nonce      uint64
	Poison     bool
	Absorbed   bool
}

// ErrFenced means another writer fenced this one (a 412 on a slot that is
// not its own, or an absorb refused by the epoch check).
var ErrFenced = errors.New("fenced by another writer")

// errCrash ends a session at a crash fault.
var errCrash = errors.New("crash fault")

type counters struct {
	flights, flightBytes, absorbed, records, content, txs  atomic.Int64
	poisons, fences, failovers, crashes, lost, lostReplies atomic.Int64
	retention, erasures, erased                            atomic.Int64
	epoch, putNanos, absorbNanos                           atomic.Int64
}

// writer is one Write call: one star, one or more sessions.
type writer struct {
	db       *catalog.DB
	wp       *writepath.DB // the write path's statements
	chain    chain
	opts     WriteOptions
	star     catalog.Star // static fields: ChainClass, FenceWindow
	gen      Content
	profiles map[bundlefmt.StreamID]StreamProfile
	log      *slog.Logger
	start    time.Time
	deadline time.Time
	c        counters

	slotsMu sync.Mutex
	slots   map[[2]int64]*SlotOutcome
	eraser  *eraser
}

// Write plays the write path on one star until a bound is reached (see
// WriteOptions). It returns ErrFenced when another writer fenced it.
func Write(ctx context.Context, db *catalog.DB, st Storage, opts WriteOptions) (WriteStats, error) {
	if err := opts.defaults(); err != nil {
		return WriteStats{Star: opts.Star}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	star, err := db.Streams().Star(ctx, opts.Star)
	if err != nil {
		return WriteStats{Star: opts.Star}, err
	}
	wp := writepath.New(db)
	prof, err := wp.Star(ctx, opts.Star)
	if err != nil {
		return WriteStats{Star: opts.Star}, fmt.Errorf("star %q was not set up by novasim setup: %w", opts.Star, err)
	}
	buckets := st.slotBuckets(star.ChainClass)
	if len(buckets) == 0 {
		return WriteStats{Star: opts.Star}, fmt.Errorf("%w: express star %q needs s3-express-buckets", ErrUsage, opts.Star)
	}
	w := &writer{
		db:       db,
		wp:       wp,
		chain:    chain{store: st.Store, star: opts.Star, buckets: buckets},
		opts:     opts,
		star:     star,
		gen:      contentOf(prof),
		profiles: map[bundlefmt.StreamID]StreamProfile{},
		log:      opts.Logger.With("star", opts.Star),
		start:    time.Now(),
		slots:    map[[2]int64]*SlotOutcome{},
	}
	if opts.Duration > 0 {
		w.deadline = w.start.Add(opts.Duration)
	}
	w.eraser = newEraser(w)
	stopProgress := w.progress()
	stopRetention := w.retention(ctx)
	stats, err := w.run(ctx)
	if rerr := stopRetention(); rerr != nil && err == nil {
		err = rerr
	}
	stats.Retention = w.c.retention.Load()
	stopProgress()
	return stats, err
}

func (w *writer) run(ctx context.Context) (WriteStats, error) {
	nonce := newNonce()
	epoch, err := w.takeover(ctx, nonce, w.opts.Takeover)
	if err != nil {
		return w.stats(), err
	}
	for i := uint64(0); ; i++ {
		if w.exhausted() {
			return w.stats(), nil
		}
		s, err := w.newSession(ctx, nonce, epoch, i)
		if err != nil {
			return w.stats(), err
		}
		out := s.run(ctx)
		switch {
		case out.err != nil:
			return w.stats(), out.err
		case out.next != nil:
			nonce, epoch = out.next.nonce, out.next.epoch
		case out.crashed:
			w.c.crashes.Add(1)
			w.log.Info("writer crashed between PUT and absorb; a new session fences", "epoch", epoch)
			nonce = newNonce()
			if epoch, err = w.takeover(ctx, nonce, TakeoverAlways); err != nil {
				return w.stats(), err
			}
		default:
			return w.stats(), nil
		}
	}
}

// exhausted reports whether a bound is reached.
func (w *writer) exhausted() bool {
	o := w.opts
	switch {
	case o.Flights > 0 && w.c.flights.Load() >= o.Flights,
		o.Bytes > 0 && w.c.flightBytes.Load() >= o.Bytes,
		!w.deadline.IsZero() && !time.Now().Before(w.deadline):
		return true
	}
	if o.Stop != nil {
		select {
		case <-o.Stop:
			return true
		default:
		}
	}
	return false
}

func (w *writer) stats() WriteStats {
	s := WriteStats{
		Star:         w.opts.Star,
		Flights:      w.c.flights.Load(),
		FlightBytes:  w.c.flightBytes.Load(),
		Absorbed:     w.c.absorbed.Load(),
		Records:      w.c.records.Load(),
		ContentBytes: w.c.content.Load(),
		AbsorbTxs:    w.c.txs.Load(),
		Poisons:      w.c.poisons.Load(),
		Fences:       w.c.fences.Load(),
		Failovers:    w.c.failovers.Load(),
		Crashes:      w.c.crashes.Load(),
		LostFaults:   w.c.lost.Load(),
		LostReplies:  w.c.lostReplies.Load(),
		Retention:    w.c.retention.Load(),
		Erasures:     w.c.erasures.Load(),
		Erased:       w.c.erased.Load(),
		Epoch:        w.c.epoch.Load(),
		Elapsed:      time.Since(w.start),
		PutTime:      time.Duration(w.c.putNanos.Load()),
		AbsorbTime:   time.Duration(w.c.absorbNanos.Load()),
	}
	s.Unabsorbed = s.Flights - s.Absorbed
	if w.opts.RecordSlots {
		w.slotsMu.Lock()
		for _, o := range w.slots {
			s.Slots = append(s.Slots, *o)
		}
		w.slotsMu.Unlock()
		sort.Slice(s.Slots, func(i, j int) bool {
			a, b := s.Slots[i], s.Slots[j]
			return a.Epoch < b.Epoch || a.Epoch == b.Epoch && a.Seq < b.Seq
		})
	}
	return s
}

// progress calls opts.Progress every second until the returned stop.
func (w *writer) progress() (stop func()) {
	if w.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				w.opts.Progress(w.stats())
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		w.opts.Progress(w.stats())
	}
}

func (w *writer) recordSlot(epoch, seq int64, nonce uint64, poison, absorbed bool) {
	if !w.opts.RecordSlots {
		return
	}
	w.slotsMu.Lock()
	defer w.slotsMu.Unlock()
	k := [2]int64{epoch, seq}
	if o := w.slots[k]; o != nil {
		o.Absorbed = o.Absorbed || absorbed
		return
	}
	w.slots[k] = &SlotOutcome{Epoch: epoch, Seq: seq, Nonce: nonce, Poison: poison, Absorbed: absorbed}
}

// newNonce returns a fresh random writer-session nonce.
func newNonce() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return binary.LittleEndian.Uint64(b[:])
}

// takeover makes this writer the star's writer and returns its epoch.
func (w *writer) takeover(ctx context.Context, nonce uint64, mode Takeover) (int64, error) {
	st, err := w.db.Streams().Star(ctx, w.opts.Star)
	if err != nil {
		return 0, err
	}
	switch mode {
	case TakeoverNever:
		w.c.epoch.Store(st.Epoch)
		return st.Epoch, nil
	case TakeoverAuto:
		if st.Epoch == 1 && st.NextSeq == 0 {
			free, err := w.firstWindowFree(ctx)
			if err != nil {
				return 0, err
			}
			if free {
				w.c.epoch.Store(1)
				return 1, nil
			}
		}
	}
	return w.fence(ctx, nonce)
}

// firstWindowFree reports whether no slot (1, 0..W-1) exists in any bucket.
func (w *writer) firstWindowFree(ctx context.Context) (bool, error) {
	for seq := int64(0); seq < int64(w.star.FenceWindow); seq++ {
		for _, b := range w.chain.buckets {
			_, err := w.chain.readEnvelope(ctx, b, w.chain.key(1, seq))
			switch {
			case isNotFound(err):
			case err == nil || bundlefmt.ClassOf(err) != "":
				return false, nil // something stands there
			default:
				return false, fmt.Errorf("probe the first slots of star %q: %w", w.opts.Star, err)
			}
		}
	}
	return true, nil
}

// fence runs the fencing protocol of docs/metastore.md step by step and returns
// the new epoch: (1) epoch bump in one transaction, noting the head h;
// (2) the first seq k >= h where a poison PUT succeeds (a 412 is a lost
// flight, left as it is), then poisons k+1 .. k+W-1; (3) end_seq = k + W.
// A past epoch left without end_seq by a fencer that died is finished first.
func (w *writer) fence(ctx context.Context, nonce uint64) (int64, error) {
	star := w.opts.Star
	eps, err := w.db.Streams().StarEpochs(ctx, star)
	if err != nil {
		return 0, err
	}
	for i, e := range eps {
		if e.EndSeq != nil || i == len(eps)-1 {
			continue
		}
		// A fence in progress whose fencer died: h is lost with it, so the
		// run starts at the trim cursor's seq in that epoch (trim releases
		// nothing of an epoch being fenced) or at 0; the slots below the
		// first free seq answer 412 and are passed.
		from := int64(0)
		if ce, cs, ok, err := w.db.Streams().TrimCursor(ctx, star); err != nil {
			return 0, err
		} else if ok && ce == e.Epoch {
			from = cs
		}
		k, err := w.poisonRun(ctx, e.Epoch, from, nonce)
		if err != nil {
			return 0, err
		}
		if err := w.wp.EndFence(ctx, star, e.Epoch, k+int64(w.star.FenceWindow)); err != nil {
			return 0, err
		}
		w.log.Info("finished an interrupted fence", "epoch", e.Epoch, "end_seq", k+int64(w.star.FenceWindow))
	}
	e, h, err := w.wp.BeginFence(ctx, star)
	if err != nil {
		return 0, err
	}
	k, err := w.poisonRun(ctx, e, h, nonce)
	if err != nil {
		return 0, fmt.Errorf("fence epoch %d of star %q: %w", e, star, err)
	}
	end := k + int64(w.star.FenceWindow)
	if err := w.wp.EndFence(ctx, star, e, end); err != nil {
		return 0, err
	}
	w.c.fences.Add(1)
	w.c.epoch.Store(e + 1)
	w.log.Info("fenced", "epoch", e, "head", h, "first_poison", k, "end_seq", end, "new_epoch", e+1)
	return e + 1, nil
}

// poisonRun is step 2 of fencing: it returns k.
func (w *writer) poisonRun(ctx context.Context, epoch, from int64, nonce uint64) (int64, error) {
	k := from
	for ; ; k++ {
		_, err := w.chain.putSlot(ctx, epoch, k, nonce, bundlefmt.EncodePoison(uint64(epoch), uint64(k), nonce), false)
		if err == nil {
			break
		}
		if !isTaken(err) {
			return 0, err
		}
	}
	w.c.poisons.Add(1)
	w.recordSlot(epoch, k, nonce, true, false)
	for j := k + 1; j < k+int64(w.star.FenceWindow); j++ {
		_, err := w.chain.putSlot(ctx, epoch, j, nonce, bundlefmt.EncodePoison(uint64(epoch), uint64(j), nonce), false)
		switch {
		case err == nil:
			w.c.poisons.Add(1)
			w.recordSlot(epoch, j, nonce, true, false)
		case !isTaken(err):
			return 0, err
		}
	}
	return k, nil
}
