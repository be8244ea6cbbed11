package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// ServeHTTP serves srv on ln until it is shut down (http.ErrServerClosed),
// as http.Server.Serve, for the operator surface of serve and of a fleet
// member. With a web configuration file (--web-config-file), through the
// Prometheus exporter-toolkit: HTTPS with its tls_server_config, basic
// auth on every path with its basic_auth_users; the file and the
// certificates are read again on each connection and request. Empty:
// plain HTTP, no authentication.
func ServeHTTP(ln net.Listener, srv *http.Server, webConfigFile string, log *slog.Logger) error {
	if webConfigFile == "" {
		return srv.Serve(ln)
	}
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &webConfigFile}, log)
}

// CheckWebConfig reports whether the web configuration file parses, its
// password hashes are bcrypt's and its certificate and key load: what
// serve checks at start, so that a bad file is a configuration error
// rather than an endpoint that refuses every connection. "" is valid.
func CheckWebConfig(webConfigFile string) error {
	if webConfigFile == "" {
		return nil
	}
	return web.Validate(webConfigFile)
}

// Handler serves the operator surface (docs/operations.md#operator-surface):
//
//	/metrics  the injected registry, in the Prometheus text format
//	/healthz  200 while the process runs
//	/readyz   200 when the database answers and its schema is this binary's
//	          (a standby is ready); 503 with the reason otherwise
//	/status   the JSON of `auditor status --json`
//	/debug/pprof/  the Go profiler, only with Config.Pprof (--pprof): it
//	          exposes internals and costs CPU while a profile runs
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	if d.cfg.Pprof {
		HandlePprof(mux)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.r.deps.Gatherer, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slogPrinter{d},
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := d.ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ready (%s)\n", d.role.Load())
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		s, err := BuildStatus(ctx, d.db, StatusOptions{Star: d.cfg.Star, Policy: d.cfg.Policy, ReapGrace: d.cfg.ReapGrace,
			ErasureAlertAfter: d.cfg.ErasureAlertAfter, Trim: d.trim, CycleInterval: CycleInterval(d.cfg.Schedule, time.Now())})
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = s.WriteJSON(w)
	})
	return mux
}

// ready checks the database answers and is at this binary's schema.
func (d *Daemon) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := d.db.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	if err := d.db.CheckSchema(ctx); err != nil {
		return fmt.Errorf("database schema: %w", err)
	}
	return nil
}

// slogPrinter lets promhttp log through the daemon's logger.
type slogPrinter struct{ d *Daemon }

func (p slogPrinter) Println(v ...any) { p.d.log.Warn("metrics", "err", fmt.Sprint(v...)) }

// HandlePprof serves the Go profiler under /debug/pprof/ on mux (--pprof):
// the daemon's endpoint and a fleet member's.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
