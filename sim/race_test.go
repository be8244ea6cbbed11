package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// slotNonces reads the nonce of every slot a ref names.
func slotNonces(t *testing.T, db *catalog.DB, st Storage, star string) map[[2]int64]uint64 {
	t.Helper()
	ctx := context.Background()
	streams, err := db.Streams().StreamsOfStar(ctx, star)
	if err != nil {
		t.Fatal(err)
	}
	s, err := db.Streams().Star(ctx, star)
	if err != nil {
		t.Fatal(err)
	}
	c := chain{store: st.Store, star: star, buckets: st.slotBuckets(s.ChainClass)}
	out := map[[2]int64]uint64{}
	for _, str := range streams {
		refs, err := writepath.New(db).RefsOfStream(ctx, str.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			for _, sl := range r.Slots {
				k := [2]int64{sl.Epoch, sl.Seq}
				if _, ok := out[k]; ok {
					continue
				}
				env, err := c.readEnvelope(ctx, c.buckets[0], c.key(sl.Epoch, sl.Seq))
				if err != nil {
					t.Fatalf("slot %v: %v", k, err)
				}
				out[k] = env.Nonce
			}
		}
	}
	return out
}

// absorbedBy maps each slot a writer says it absorbed to its nonce.
func absorbedBy(ws WriteStats) map[[2]int64]uint64 {
	out := map[[2]int64]uint64{}
	for _, s := range ws.Slots {
		if s.Absorbed {
			out[[2]int64{s.Epoch, s.Seq}] = s.Nonce
		}
	}
	return out
}

// testStaleWriterRace runs a writer at epoch 1, then a second writer that
// fences it while it writes. The stale writer must stop (ErrFenced), never
// absorb a slot at or past the fence, and the two must never both absorb a
// slot; every ref must name a slot holding its absorber's nonce.
func testStaleWriterRace(t *testing.T, db *catalog.DB, st Storage, star string) {
	ctx := context.Background()
	if _, err := Setup(ctx, db, SetupOptions{Star: star, Streams: 24, FenceWindow: 4, Content: smallContent(11)}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ws  WriteStats
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		ws, err := Write(ctx, db, st, WriteOptions{Star: star, Duration: time.Minute, FlightBytes: 8 << 10,
			AbsorbFlights: 2, RecordSlots: true, Session: 1})
		aDone <- result{ws, err}
	}()
	// Let A absorb a few flights, then take over while its PUTs fly.
	for {
		s, err := db.Streams().Star(ctx, star)
		if err != nil {
			t.Fatal(err)
		}
		if s.NextSeq >= 8 {
			break
		}
		select {
		case r := <-aDone:
			t.Fatalf("the first writer ended before its eighth flight: %v", r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	b, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: 40, FlightBytes: 8 << 10, AbsorbFlights: 2,
		Takeover: TakeoverAlways, RecordSlots: true, Session: 2})
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	a := <-aDone
	if !errors.Is(a.err, ErrFenced) {
		t.Fatalf("stale writer ended with %v, want ErrFenced", a.err)
	}
	eps, err := db.Streams().StarEpochs(ctx, star)
	if err != nil || len(eps) != 2 || eps[0].EndSeq == nil {
		t.Fatalf("epochs: %+v %v", eps, err)
	}
	fenceStart := *eps[0].EndSeq - 4
	aAbs, bAbs := absorbedBy(a.ws), absorbedBy(b)
	if len(aAbs) == 0 || len(bAbs) == 0 {
		t.Fatalf("absorbed: stale %d, new %d", len(aAbs), len(bAbs))
	}
	for k := range aAbs {
		if _, both := bAbs[k]; both {
			t.Errorf("slot %v absorbed by both writers", k)
		}
		if k[0] != 1 || k[1] >= fenceStart {
			t.Errorf("stale writer absorbed slot %v (fence run starts at 1/%d)", k, fenceStart)
		}
	}
	for k := range bAbs {
		if k[0] != 2 {
			t.Errorf("new writer absorbed slot %v outside epoch 2", k)
		}
	}
	for k, nonce := range slotNonces(t, db, st, star) {
		want, ok := aAbs[k]
		if !ok {
			want, ok = bAbs[k]
		}
		if !ok || want != nonce {
			t.Errorf("ref names slot %v with nonce %016x; absorbed by a writer with %016x (%v)", k, nonce, want, ok)
		}
	}
	rep := mustCheck(t, db, st, CheckOptions{Stars: []string{star}})
	// Every flight no ref names is one of the writers' unabsorbed flights.
	lost := map[[2]int64]bool{}
	for _, ws := range []WriteStats{a.ws, b} {
		for _, s := range ws.Slots {
			if !s.Poison && !s.Absorbed {
				lost[[2]int64{s.Epoch, s.Seq}] = true
			}
		}
	}
	if len(rep.Chain.Unreferenced) != len(lost) {
		t.Errorf("check found %d unreferenced flights, the writers left %d", len(rep.Chain.Unreferenced), len(lost))
	}
	for _, s := range rep.Chain.Unreferenced {
		if !lost[[2]int64{s.Epoch, s.Seq}] {
			t.Errorf("unreferenced flight %v is not one the writers left", s)
		}
	}
	t.Logf("stale: %+v", summaryW(a.ws))
	t.Logf("new:   %+v", summaryW(b))
}

// testSameEpochRace runs two writers at the same epoch without fencing (a
// zombie that believes it is current): the conditional PUT gives each seq
// to one of them, and no seq is absorbed by both.
func testSameEpochRace(t *testing.T, db *catalog.DB, st Storage, star string) {
	ctx := context.Background()
	if _, err := Setup(ctx, db, SetupOptions{Star: star, Streams: 12, FenceWindow: 3, Content: smallContent(12)}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ws  WriteStats
		err error
	}
	// Warm the pool so neither writer waits for a new connection.
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = db.Now(ctx)
			time.Sleep(10 * time.Millisecond)
		}()
	}
	wg.Wait()
	done := make(chan result, 2)
	start := make(chan struct{})
	for i := 0; i < 2; i++ {
		go func() {
			<-start
			ws, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: 200, FlightBytes: 4 << 10, AbsorbFlights: 1,
				Takeover: TakeoverNever, RecordSlots: true, Session: uint64(i)})
			done <- result{ws, err}
		}()
	}
	close(start)
	r1, r2 := <-done, <-done
	for _, r := range []result{r1, r2} {
		if r.err != nil && !errors.Is(r.err, ErrFenced) && !errors.Is(r.err, writepath.ErrOutOfOrder) {
			t.Fatalf("writer ended with %v", r.err)
		}
	}
	abs1, abs2 := absorbedBy(r1.ws), absorbedBy(r2.ws)
	for k := range abs1 {
		if _, both := abs2[k]; both {
			t.Errorf("slot %v absorbed by both writers", k)
		}
	}
	for k, nonce := range slotNonces(t, db, st, star) {
		want, ok := abs1[k]
		if !ok {
			want, ok = abs2[k]
		}
		if !ok || want != nonce {
			t.Errorf("ref names slot %v with nonce %016x; absorbed by a writer with %016x (%v)", k, nonce, want, ok)
		}
	}
	mustCheck(t, db, st, CheckOptions{Stars: []string{star}})
	t.Logf("writer 1: %v, %+v", r1.err, summaryW(r1.ws))
	t.Logf("writer 2: %v, %+v", r2.err, summaryW(r2.ws))
}

func TestWriterRacesMemory(t *testing.T) {
	t.Parallel()
	t.Run("stale-epoch", func(t *testing.T) {
		t.Parallel()
		testStaleWriterRace(t, newTestDB(t), Storage{Store: newFaultStore(t), Standard: "std"}, "r1")
	})
	t.Run("same-epoch", func(t *testing.T) {
		t.Parallel()
		// PUTs take a little while, so the two writers' windows interleave.
		ms := newFaultStore(t)
		ms.beforePut = func(_, _ string) error {
			time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
			return nil
		}
		testSameEpochRace(t, newTestDB(t), Storage{Store: ms, Standard: "std"}, "r2")
	})
	t.Run("stale-epoch-express", func(t *testing.T) {
		t.Parallel()
		db := newTestDB(t)
		fs := newFaultStore(t)
		st := Storage{Store: fs, Standard: "std", Express: fs.express(3)}
		ctx := context.Background()
		// An express star only: all streams on it.
		if _, err := Setup(ctx, db, SetupOptions{Star: "base", Streams: 1, Content: smallContent(1)}); err != nil {
			t.Fatal(err)
		}
		testStaleWriterRaceExpress(t, db, st)
	})
}

func testStaleWriterRaceExpress(t *testing.T, db *catalog.DB, st Storage) {
	ctx := context.Background()
	if _, err := Setup(ctx, db, SetupOptions{Star: "xbase", ExpressStar: "rx", Streams: 20, ExpressShare: 1, FenceWindow: 4, Content: smallContent(13)}); err != nil {
		t.Fatal(err)
	}
	a := make(chan error, 1)
	go func() {
		_, err := Write(ctx, db, st, WriteOptions{Star: "rx", Duration: time.Minute, FlightBytes: 8 << 10, AbsorbFlights: 2})
		a <- err
	}()
	// Wait for the first writer to be six flights in; if it ends first
	// (it failed), say so instead of waiting forever.
	for {
		s, _ := db.Streams().Star(ctx, "rx")
		if s.NextSeq >= 6 {
			break
		}
		select {
		case err := <-a:
			t.Fatalf("the first express writer ended before its sixth flight: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "rx", Flights: 30, FlightBytes: 8 << 10, Takeover: TakeoverAlways}); err != nil {
		t.Fatal(err)
	}
	if err := <-a; !errors.Is(err, ErrFenced) {
		t.Fatalf("stale express writer ended with %v", err)
	}
	mustCheck(t, db, st, CheckOptions{Stars: []string{"rx"}})
	_ = bundlefmt.KindFlight
}
