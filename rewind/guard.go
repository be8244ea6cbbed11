// Package rewind finds a metastore that has gone back in time before the
// auditor acts on it (docs/architecture.md#rewind-detection).
//
// A restore from backup, or a failover to a replica that lost its last
// commits, rewinds the metastore while the object store keeps what the
// auditor did since: objects published, revisions superseded and reaped,
// slots deleted. A leader that trusted such a metastore would reference
// objects it already deleted. So before a term (and before deletes long
// into one) the leader *begins*: it writes a create-once marker object
// numbered one above the star's mark, commits the mark in the metastore,
// and confirms the marker with a second create-once object. A confirmed
// marker above the mark the metastore holds proves the metastore forgot
// the commit of that mark: the star halts (cycle.RewoundError) until
// `auditor reconcile` has rebuilt the metastore from the store.
//
// The package owns that protocol, the marker's content and the guard
// step; it does not own reconcile, nor the halt's persistence (the
// daemon's).
package rewind

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// Catalog is what the guard reads and writes in the metastore
// (*catalog.Restore).
type Catalog interface {
	Mark(ctx context.Context, star string) (catalog.Mark, error)
	MarkFenced(ctx context.Context, f catalog.Fence) (catalog.Mark, error)
	CommitMark(ctx context.Context, f catalog.Fence, prev, next int64) error
}

// MaxSkips bounds the markers a begin passes over that were written and
// never confirmed (each one a process that died, or whose commit failed,
// between its marker and its commit; a process takes up its own marker
// again): a cost bound of two requests each, met only after thousands of
// such deaths in a row. Past it the begin fails (retried) and says so.
const MaxSkips = 4096

// Deps are what the guard works with.
type Deps struct {
	DB     Catalog
	Store  objstore.Store // the store; markers live in Bucket
	Bucket string         // the standard bucket
	Log    *slog.Logger
	// Marks counts the markers written (nil: not counted).
	Marks *prometheus.CounterVec
}

// Config is the guard's policy.
type Config struct {
	Star   string
	Holder string
	// MaxAge is how old the term's last begin may be when something is
	// about to be deleted: half the reap grace (MaxAgeFor). Zero (a zero
	// grace, in tests) begins again before every delete. A DELETE is
	// harmful after a rewind only if what it removes was armed after the
	// restored point, so at least a reap grace after it: a begin younger
	// than half the grace was made after that point and is in the store.
	MaxAge time.Duration
}

// Guard is the rewind check of one star: a cycle step (run first) and the
// deleters' freshness check.
type Guard struct {
	d Deps
	c Config

	// nonce tells this process's markers from every other's: one per
	// guard, so a begin retried after a failed commit (a database outage)
	// takes up its own marker instead of passing over it.
	nonce string

	mu    sync.Mutex
	token int64     // the term of the last begin (0: none)
	at    time.Time // when the last begin started (host monotonic clock)
	mark  int64     // its mark
}

var _ cycle.Step = (*Guard)(nil)

// New returns the guard of one star.
func New(d Deps, c Config) (*Guard, error) {
	switch {
	case d.DB == nil:
		return nil, errors.New("rewind: no database")
	case d.Store == nil || d.Bucket == "":
		return nil, errors.New("rewind: no store or bucket")
	case !bundlefmt.ValidStar(c.Star):
		return nil, fmt.Errorf("rewind: invalid star %q", c.Star)
	case c.MaxAge < 0:
		return nil, fmt.Errorf("rewind: MaxAge %s must not be negative", c.MaxAge)
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce) // crypto/rand never fails on supported platforms
	return &Guard{d: d, c: c, nonce: hex.EncodeToString(nonce)}, nil
}

// MaxAgeFor is the freshness bound of a begin for a reap grace: half of it.
func MaxAgeFor(reapGrace time.Duration) time.Duration { return reapGrace / 2 }

// Name implements cycle.Step.
func (g *Guard) Name() string { return "rewind" }

// Run implements cycle.Step: it begins when the term is new or its last
// begin is older than MaxAge. A dry run checks nothing (it writes nothing
// and deletes nothing).
func (g *Guard) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	var c cycle.Counts
	if opts.DryRun {
		return c, nil
	}
	err := g.fresh(ctx, f, &c)
	return c, err
}

// Fresh makes sure the term's last begin is younger than MaxAge, beginning
// again otherwise: deleters call it before each batch of deletes. A
// *cycle.RewoundError (a halt) when the store proves the metastore behind.
func (g *Guard) Fresh(ctx context.Context, f catalog.Fence) error {
	var c cycle.Counts
	return g.fresh(ctx, f, &c)
}

func (g *Guard) fresh(ctx context.Context, f catalog.Fence, c *cycle.Counts) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.token == f.Token && time.Since(g.at) < g.c.MaxAge {
		// Within the term and the age, unless the metastore's mark is no
		// longer this term's own: a restore can hand out the same token
		// again, so the token alone does not tell.
		m, err := g.d.DB.Mark(ctx, g.c.Star)
		if err != nil {
			return err
		}
		if m.N == g.mark {
			return nil
		}
	}
	start := time.Now() // before the marker goes out: the begin is no older than this
	n, err := g.begin(ctx, f, c)
	if err != nil {
		return err
	}
	g.token, g.at, g.mark = f.Token, start, n
	return nil
}

// marker is a marker object's content (docs/format.md#marker-objects).
type marker struct {
	Format    string `json:"format"`
	Star      string `json:"star"`
	Mark      int64  `json:"mark"`
	Token     int64  `json:"token"`
	Holder    string `json:"holder"`
	Nonce     string `json:"nonce"`
	WrittenAt string `json:"written_at"` // the writer's clock, for people
}

// MarkerFormat names the marker content's version.
const MarkerFormat = "nova-auditor-mark/1"

// maxMarkerBytes bounds a marker read back (a marker is ~250 bytes).
const maxMarkerBytes = 4096

// begin walks from the metastore's mark to the first number whose marker
// it can write (passing markers written and never confirmed), commits the
// mark there and confirms it. It returns the mark.
func (g *Guard) begin(ctx context.Context, f catalog.Fence, c *cycle.Counts) (int64, error) {
	m, err := g.d.DB.Mark(ctx, g.c.Star)
	if err != nil {
		return 0, err
	}
	mk := marker{Format: MarkerFormat, Star: g.c.Star, Token: f.Token, Holder: g.c.Holder,
		Nonce: g.nonce, WrittenAt: time.Now().UTC().Format(time.RFC3339Nano)}
	n := m.N + 1
	for skips := 0; ; n++ {
		mk.Mark = n
		body, _ := json.Marshal(mk) // plain fields: never fails
		c.S3Requests++
		err := g.d.Store.PutIfAbsent(ctx, g.d.Bucket, bundlefmt.MarkKey(g.c.Star, uint64(n)), body)
		if err == nil {
			g.count("written")
			break
		}
		if !errors.Is(err, objstore.ErrExists) {
			return 0, fmt.Errorf("write marker %d of star %q: %w", n, g.c.Star, err)
		}
		mine, err := g.written(ctx, n, mk.Nonce, c)
		if err != nil {
			return 0, err
		}
		if mine {
			break // our own attempt whose answer was lost
		}
		confirmed, err := g.confirmed(ctx, n, c)
		if err != nil {
			return 0, err
		}
		if confirmed {
			// A leader that lost its lease meanwhile sees its successor's
			// markers: only a fenced read under a live lease, still at the
			// mark read, proves the metastore forgot them.
			now, err := g.d.DB.MarkFenced(ctx, f)
			if err != nil {
				return 0, err
			}
			if now.N != m.N {
				return 0, fmt.Errorf("star %q: the mark moved from %d to %d during a begin; the next cycle begins again", g.c.Star, m.N, now.N)
			}
			return 0, &cycle.RewoundError{Detail: fmt.Sprintf(
				"the store holds confirmed marker %d of star %q (%s), the metastore's mark is %d: it has forgotten commits "+
					"(a restore from backup or a failover to a replica that lost them); run auditor reconcile --star %s",
				n, g.c.Star, bundlefmt.MarkKey(g.c.Star, uint64(n)), m.N, g.c.Star)}
		}
		g.count("skipped")
		if skips++; skips > MaxSkips {
			return 0, fmt.Errorf("star %q: markers %d to %d were written and never confirmed; if the metastore was restored, "+
				"run auditor reconcile --star %s", g.c.Star, m.N+1, n, g.c.Star)
		}
	}
	if err := g.d.DB.CommitMark(ctx, f, m.N, n); err != nil {
		return 0, err
	}
	mk.Mark = n
	body, _ := json.Marshal(mk)
	c.S3Requests++
	if err := g.d.Store.PutIfAbsent(ctx, g.d.Bucket, bundlefmt.MarkConfirmKey(g.c.Star, uint64(n)), body); err != nil &&
		!errors.Is(err, objstore.ErrExists) {
		// Only this term confirms n (it alone committed it): a standing
		// confirmation is its own earlier attempt.
		return 0, fmt.Errorf("confirm marker %d of star %q: %w", n, g.c.Star, err)
	}
	g.d.Log.Info("store mark begun", "star", g.c.Star, "mark", n, "token", f.Token, "passed", n-m.N-1)
	return n, nil
}

// written reports whether marker n holds nonce (our own write whose
// answer was lost).
func (g *Guard) written(ctx context.Context, n int64, nonce string, c *cycle.Counts) (bool, error) {
	c.S3Requests++
	data, _, err := g.d.Store.GetRange(ctx, g.d.Bucket, bundlefmt.MarkKey(g.c.Star, uint64(n)), 0, maxMarkerBytes)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, fmt.Errorf("marker %d of star %q refused a create-once write and then read as missing: %w",
			n, g.c.Star, objstore.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("read marker %d of star %q: %w", n, g.c.Star, err)
	}
	var got marker
	if err := json.Unmarshal(data, &got); err != nil {
		return false, nil // not ours, whatever it is
	}
	return got.Nonce == nonce, nil
}

// confirmed reports whether marker n has its confirmation.
func (g *Guard) confirmed(ctx context.Context, n int64, c *cycle.Counts) (bool, error) {
	c.S3Requests++
	_, err := g.d.Store.Head(ctx, g.d.Bucket, bundlefmt.MarkConfirmKey(g.c.Star, uint64(n)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, objstore.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("read the confirmation of marker %d of star %q: %w", n, g.c.Star, err)
}

func (g *Guard) count(outcome string) {
	if g.d.Marks != nil {
		g.d.Marks.WithLabelValues(outcome).Inc()
	}
}

// NewMarksCounter registers nova_auditor_store_marks_total on reg (never
// the default registerer).
func NewMarksCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nova_auditor_store_marks_total",
		Help: "Marker objects of the rewind check, by outcome: written (a begin's marker), skipped (a marker written and never confirmed, passed over).",
	}, []string{"outcome"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("register nova_auditor_store_marks_total: %w", err)
	}
	return c, nil
}
