package main

import (
	"context"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/faultstore"
	"github.com/nova/auditor/objstore"
)

// leader is one in-process auditor of the explorer's star: the cycle
// built by the production wiring (buildParts, as run --once and serve
// build it) over the fault store, run by daemon.RunOnce under the lease.
// It reaches Postgres through a proxy of its own and the store through a
// gate of its own, so that a crash stops both at once
// (docs/architecture.md#the-fault-explorer).
type leader struct {
	ep    *episode
	name  string // the lease holder (kept by a restart, as a restarted pod keeps its name)
	app   string // its sessions' application_name: this incarnation's alone
	cfg   config.Config
	dc    daemon.Config
	db    *catalog.DB
	proxy *testenv.Proxy
	gate  *faultstore.Gate
	ctx   context.Context
	stop  context.CancelFunc
	steps []cycle.Step
	close func()
	// The parts reconcile works with, as cmdReconcile takes them from
	// buildParts.
	parts parts
	log   *slog.Logger

	mu       sync.Mutex
	arm      *arm
	dead     bool
	shutDone bool
}

// arm is a crash or pause point armed in one leader: it acts at the n-th
// hit of point.
type arm struct {
	point   crashpoint.Point
	n       int
	crash   bool
	hits    int
	reached chan struct{}
	release chan struct{}
}

// newLeader builds a leader incarnation named name.
func (ep *episode) newLeader(t testing.TB, name string) (*leader, error) {
	l := &leader{ep: ep, name: name, gate: &faultstore.Gate{}, app: fmt.Sprintf("%s/%s/%d", ep.star, name, len(ep.all))}
	l.proxy = testenv.NewProxy(t, ep.x.pgAddr)
	url := l.proxy.URL(t, ep.url)
	cfg := ep.config(name)
	cfg.DatabaseURL = url
	capBytes := ep.capBytes()
	cfg.DenormOutputCapMiB = max(1, capBytes>>20)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := catalog.Open(context.Background(), url+sep+"pool_max_conns=6&application_name="+neturl.QueryEscape(l.app))
	if err != nil {
		l.proxy.Cut()
		return nil, fmt.Errorf("leader %s: %w", name, err)
	}
	l.db = db
	mdb := db
	if ep.mut.catalog != (catalog.Mutations{}) {
		mdb = db.Mutated(ep.mut.catalog)
	}
	l.ctx, l.stop = context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	if ep.x.trace {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("leader", name)
	}
	p, err := buildParts(l.ctx, cfg, mdb, log, prometheus.NewRegistry(), false, shared{
		footers:   footerCache(cfg),
		capBytes:  capBytes,
		crashHook: l.hook,
		wrapStore: func(s objstore.Store) objstore.Store { return ep.inj.Wrap(s, l.gate) },
		mutations: ep.mut.settle,
	})
	if err != nil {
		l.shut()
		return nil, fmt.Errorf("leader %s: %w", name, err)
	}
	l.cfg, l.steps, l.close, l.log = cfg, p.steps, p.settler.Close, log
	l.parts = p
	l.dc = daemonConfig(cfg)
	l.dc.Policy = p.policy
	return l, nil
}

// config is the configuration of a leader of the episode: the run --once
// flags of the crash matrix, with leases that never renew nor expire
// within an episode (the explorer expires them: the ttl running out).
func (ep *episode) config(name string) config.Config {
	cfg := config.Defaults()
	cfg.Star, cfg.Holder = ep.star, name
	cfg.Bucket = ep.b.Std
	if ep.b.Name == "file" {
		cfg.FSRoot = ep.b.Root
	} else {
		cfg.S3Endpoint, cfg.S3PathStyle, cfg.S3Region, cfg.Verify = ep.b.S3.Endpoint, true, ep.b.S3.Region, "readback"
	}
	cfg.DataDir = filepath.Join(ep.dir, "data-"+name)
	cfg.DenormLinger, cfg.ExpressDenormLinger, cfg.DenormTailGrowth = 0, 0, 0
	cfg.ReapGrace, cfg.StrayGuard = exploreGrace, 2*exploreGrace
	cfg.LeaseTTL, cfg.LeaseRenew = 24*exploreGrace, 12*exploreGrace
	if ep.rnd.IntN(3) == 0 {
		cfg.LeaseRenew = leaseRenewFast // renewals inside its cycles: lease.after-renew is reached
	}
	cfg.DenormOutputCapMiB, cfg.DenormChunkTargetKiB = 1, 16
	cfg.SettleConcurrency, cfg.SettleBatchStreams, cfg.ReapBatchSize = 4, ep.batch, ep.reapBatch
	return cfg
}

// The leaders' lease renewal when they renew inside a cycle, and the
// smallest object of a big flight: above S3's part minimum.
const (
	leaseRenewFast = 50 * time.Millisecond
	bigFlight      = 8 << 20
)

// capBytes is an incarnation's output cap, drawn as a restart after a
// configuration change (or a fleet member of another configuration)
// would have it: a lower cap than the last leader's starts a new object
// behind a tail that leader was rewriting (the review's false
// quarantine).
func (ep *episode) capBytes() int64 {
	if ep.big {
		return []int64{24 << 20, 1 << 20}[ep.rnd.IntN(2)]
	}
	return []int64{1 << 20, 96 << 10, 32 << 10}[ep.rnd.IntN(3)]
}

// hook is the leader's crash hook: it counts every point for coverage
// and acts at the armed one.
func (l *leader) hook(p crashpoint.Point) {
	l.ep.hit(p)
	l.mu.Lock()
	a := l.arm
	fire := false
	if a != nil && a.point == p {
		a.hits++
		fire = a.hits == a.n
	}
	l.mu.Unlock()
	if !fire {
		return
	}
	if a.crash {
		// A kill: nothing this leader sends from now on reaches Postgres
		// or the store. The goroutine that hit the point blocks until
		// the episode is over; the others find the context canceled, the
		// connections cut and the gate shut.
		l.kill()
		close(a.reached)
		<-l.ep.over
		return
	}
	close(a.reached)
	select {
	case <-a.release:
	case <-l.ep.over:
	}
}

// kill stops the leader for good.
func (l *leader) kill() {
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
	l.gate.Kill()
	l.proxy.Cut()
	l.stop()
}

func (l *leader) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// shut releases what the leader holds (at the end of the episode).
func (l *leader) shut() {
	l.mu.Lock()
	done := l.shutDone
	l.shutDone = true
	l.mu.Unlock()
	if done {
		return // a restore shut it already
	}
	l.kill()
	if l.close != nil {
		l.close()
	}
	go l.db.Close() // waits for connections a blocked goroutine still holds
}

// armPoint arms a crash or pause at the n-th hit of point.
func (l *leader) armPoint(point crashpoint.Point, n int, crash bool) *arm {
	a := &arm{point: point, n: n, crash: crash, reached: make(chan struct{}), release: make(chan struct{})}
	l.mu.Lock()
	l.arm = a
	l.mu.Unlock()
	return a
}

func (l *leader) disarm() {
	l.mu.Lock()
	l.arm = nil
	l.mu.Unlock()
}

// cycleResult is what one RunOnce returned.
type cycleResult struct {
	counts cycle.Counts
	err    error
}

// start runs one cycle (run --once) in the background.
func (l *leader) start(opts cycle.Options) <-chan cycleResult {
	ch := make(chan cycleResult, 1)
	go func() {
		c, err := daemon.RunOnce(l.ctx, l.dc, daemon.Deps{DB: l.db.Ledger(), Leases: l.db.Leases(), Requests: l.db.Requests(), Steps: l.steps, Log: l.log, Crash: l.hook}, opts)
		ch <- cycleResult{c, err}
	}()
	return ch
}
