package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// TestRenewalIsNotStarvedByFencedTransactions: workers loop on fenced
// transactions that overlap (each holds its token check for a few
// milliseconds) while the lease is renewed with a short timeout. Every
// renewal must succeed. Under FOR SHARE the renewal's UPDATE waited behind
// the share lockers, which kept joining the lock ahead of it.
func TestRenewalIsNotStarvedByFencedTransactions(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{4, 8} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			db, ctx := newDB(t)
			l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var txs atomic.Int64
			var werr atomic.Value
			for range workers {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						err := db.Fenced(ctx, l.Fence, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, `SELECT pg_sleep(0.005)`)
							return err
						})
						if err != nil {
							werr.Store(err)
							return
						}
						txs.Add(1)
					}
				})
			}
			const renewals = 10
			failed := 0
			for range renewals {
				time.Sleep(100 * time.Millisecond)
				// Starved, a renewal waits as long as the workers run; 2 s
				// tells that apart from a slow machine.
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := db.Leases().RenewLease(rctx, l.Fence, time.Minute)
				cancel()
				if err != nil {
					failed++
					t.Logf("renewal failed: %v", err)
				}
			}
			close(stop)
			wg.Wait()
			if err, _ := werr.Load().(error); err != nil {
				t.Fatalf("a fenced transaction failed: %v", err)
			}
			t.Logf("%d workers: %d fenced transactions, %d of %d renewals failed", workers, txs.Load(), failed, renewals)
			if failed > 0 {
				t.Fatalf("%d of %d renewals failed under %d fenced workers", failed, renewals, workers)
			}
			if txs.Load() < int64(workers) {
				t.Fatalf("the workers ran only %d fenced transactions", txs.Load())
			}
		})
	}
}

// TestTakeoverWaitsForAnOpenFencedTransaction: a fenced transaction has
// passed its token check; the lease is then renewed and released (neither
// waits for it), and a standby's acquisition must wait until the fenced
// transaction has committed. Its write therefore lands before the new
// token exists, and the old token fails every later check.
func TestTakeoverWaitsForAnOpenFencedTransaction(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	a, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checked, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(finish) }) }
	defer release() // a failing test must not leave the transaction open (the pool's Close waits for it)
	fencedDone := make(chan error, 1)
	go func() {
		fencedDone <- db.Fenced(ctx, a.Fence, func(tx pgx.Tx) error {
			close(checked)
			<-finish
			if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, paused) VALUES ('s1', true)`); err != nil {
				return err
			}
			return nil
		})
	}()
	<-checked
	// Neither the renewal nor the release waits for the open transaction.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := db.Leases().RenewLease(rctx, a.Fence, time.Minute); err != nil {
		t.Fatalf("renewal behind an open fenced transaction: %v", err)
	}
	if err := db.Leases().ReleaseLease(rctx, a.Fence); err != nil {
		t.Fatalf("release behind an open fenced transaction: %v", err)
	}
	acquired := make(chan catalog.Lease, 1)
	go func() {
		b, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "b", "", time.Minute)
		if err != nil {
			t.Errorf("takeover: %v", err)
		}
		acquired <- b
	}()
	waitForLockWait(t, db, ctx)
	select {
	case <-acquired:
		t.Fatal("the takeover committed while a fenced transaction of the old holder was open")
	default:
	}
	release()
	if err := <-fencedDone; err != nil {
		t.Fatalf("the fenced transaction (checked before the takeover) failed: %v", err)
	}
	b := <-acquired
	if b.Token != a.Token+1 {
		t.Fatalf("takeover token %d after %d", b.Token, a.Token)
	}
	if st, err := db.Ledger().DaemonState(ctx, "s1"); err != nil || !st.Paused {
		t.Fatalf("the old holder's write is missing: %+v %v", st, err)
	}
	err = db.Fenced(ctx, a.Fence, func(pgx.Tx) error { return nil })
	if !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("a check with the old token after the takeover: %v", err)
	}
	if err := db.Fenced(ctx, b.Fence, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("a check with the new token: %v", err)
	}
}

// waitForLockWait waits until some backend of the test database waits for
// a lock (the takeover queued behind the fenced transaction).
func waitForLockWait(t *testing.T, db *catalog.DB, ctx context.Context) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		waiting, err := db.LockWaiters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the takeover never waited for a lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSameHolderAnotherProcessIsRefused: a second process given the same
// holder name does not take a live lease (which would fence the first one's
// transactions); the same process may re-acquire its own.
func TestSameHolderAnotherProcessIsRefused(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	one, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "pod", "n1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Leases().AcquireLeaseInstance(ctx, "s1", "pod", "n2", time.Minute)
	var held *catalog.LeaseHeldError
	if !errors.As(err, &held) || !held.SameHolder || held.Holder != "pod" {
		t.Fatalf("a second process with the same holder got %v", err)
	}
	t.Logf("refusal: %v", err)
	if err := db.Fenced(ctx, one.Fence, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("the first process was fenced by the second's attempt: %v", err)
	}
	again, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "pod", "n1", time.Minute)
	if err != nil || again.Token != one.Token+1 {
		t.Fatalf("the holding process re-acquiring: %+v %v", again, err)
	}
	cur, live, err := db.Leases().CurrentLease(ctx, "s1")
	if err != nil || !live || cur.Instance != "n1" || cur.Token != again.Token {
		t.Fatalf("lease row: %+v live %v %v", cur, live, err)
	}
	// Once it expires, the other process takes it.
	if err := db.Leases().ReleaseLease(ctx, again.Fence); err != nil {
		t.Fatal(err)
	}
	two, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "pod", "n2", time.Minute)
	if err != nil || two.Token != again.Token+1 {
		t.Fatalf("the second process after release: %+v %v", two, err)
	}
}

// TestLeaseCallsEndAtTheirDeadlineOnABlackholedConnection: with every
// pooled connection blackholed (accepted, never answered), acquisition and
// renewal return at their context deadline with an error instead of
// waiting for TCP to give up.
func TestLeaseCallsEndAtTheirDeadlineOnABlackholedConnection(t *testing.T) {
	t.Parallel()
	_, rawURL := testenv.MigratedDB(t)
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	ctx := context.Background()
	db, err := catalog.Open(ctx, p.URL(t, rawURL))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// pgx sends a cancel request for every connection it gave up on
		// and waits up to 15s for it: let those through.
		p.Restore()
		db.Close()
	}()
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	const deadline = 300 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error {
			_, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
			return err
		},
		"renew": func(ctx context.Context) error {
			_, err := db.Leases().RenewLease(ctx, l.Fence, time.Minute)
			return err
		},
	}
	for name, call := range calls {
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			done <- call(cctx)
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s through a blackhole succeeded", name)
			}
			t.Logf("%s returned after %s (deadline %s): %v", name, time.Since(start).Round(time.Millisecond), deadline, err)
		case <-time.After(time.Minute):
			// Far past the deadline, far short of TCP's retransmission
			// timeout (about 15 minutes): the call ignores its deadline.
			t.Fatalf("%s through a blackhole did not return", name)
		}
	}
}
