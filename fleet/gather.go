package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nova/auditor/daemon"
)

// Gatherers is the process's /metrics: its own registry and the registry
// of each star it leads, added when the star is claimed and removed when
// it is given up (so a star's series exist only on its leader).
type Gatherers struct {
	base  prometheus.Gatherer
	mu    sync.Mutex
	stars map[string]prometheus.Gatherer
}

// NewGatherers serves base plus the stars' registries.
func NewGatherers(base prometheus.Gatherer) *Gatherers {
	return &Gatherers{base: base, stars: map[string]prometheus.Gatherer{}}
}

// Add serves a star's registry.
func (g *Gatherers) Add(star string, r prometheus.Gatherer) {
	if r == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stars[star] = r
}

// Remove stops serving a star's registry.
func (g *Gatherers) Remove(star string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.stars, star)
}

// Gather implements prometheus.Gatherer.
func (g *Gatherers) Gather() ([]*dto.MetricFamily, error) {
	g.mu.Lock()
	all := prometheus.Gatherers{g.base}
	for _, r := range g.stars {
		all = append(all, r)
	}
	g.mu.Unlock()
	return all.Gather()
}

// Slots is the process's budget of cycles at once over all its stars
// (--fleet-cycles): daemon.Slots.
type Slots struct {
	ch chan struct{}
	m  *Metrics
}

// NewSlots makes n slots.
func NewSlots(n int, m *Metrics) *Slots {
	m.CycleSlots.Set(float64(n))
	return &Slots{ch: make(chan struct{}, max(n, 1)), m: m}
}

// Acquire waits for a slot.
func (s *Slots) Acquire(ctx context.Context) error {
	select {
	case s.ch <- struct{}{}:
	default:
		s.m.CycleWaits.Inc()
		select {
		case s.ch <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.m.CyclesHeld.Set(float64(len(s.ch)))
	return nil
}

// Release gives a slot back.
func (s *Slots) Release() {
	<-s.ch
	s.m.CyclesHeld.Set(float64(len(s.ch)))
}

// ReadyChecker is what /readyz checks: the database answers at this
// binary's schema.
type ReadyChecker interface {
	Ping(ctx context.Context) error
	CheckSchema(ctx context.Context) error
}

// Handler serves the member's operator surface: /metrics (the process's
// and its stars'), /healthz, /readyz (the database answers at this
// binary's schema) and /status (the stars it leads, as JSON; auditor
// status --fleet shows the whole fleet).
func (mb *Member) Handler(h ReadyChecker) http.Handler {
	mux := http.NewServeMux()
	if mb.cfg.Pprof {
		daemon.HandlePprof(mux)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(mb.gather, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		err := h.Ping(ctx)
		if err == nil {
			err = h.CheckSchema(ctx)
		}
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ready (fleet member %s, %d stars)\n", mb.cfg.Member, len(mb.Led()))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		type star struct {
			Star        string  `json:"star"`
			Token       int64   `json:"token"`
			ProgressAge float64 `json:"progress_age_seconds"`
			Leaving     string  `json:"leaving,omitempty"`
		}
		out := struct {
			Member   string `json:"member"`
			Instance string `json:"instance"`
			Stars    []star `json:"stars"`
		}{Member: mb.cfg.Member, Instance: mb.instance, Stars: []star{}}
		mb.mu.Lock()
		for _, s := range mb.seats {
			out.Stars = append(out.Stars, star{Star: s.star, Token: s.lease.Token,
				ProgressAge: s.progressAge().Seconds(), Leaving: s.leaving})
		}
		mb.mu.Unlock()
		sort.Slice(out.Stars, func(i, j int) bool { return out.Stars[i].Star < out.Stars[j].Star })
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}
