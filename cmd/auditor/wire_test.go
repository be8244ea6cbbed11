package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/testenv"
)

// TestBuildCycleMetrics: the wiring registers the object store's metrics
// with the steps' (the store is instrumented), and a second wiring on the
// same registry is an error naming the duplicate, not a panic and not a
// store silently left without metrics.
func TestBuildCycleMetrics(t *testing.T) {
	db, _ := testenv.MigratedDB(t)
	cfg := config.Defaults()
	cfg.Star, cfg.FSRoot, cfg.DataDir = "s1", filepath.Join(t.TempDir(), "store"), t.TempDir()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	if _, _, err := buildCycle(ctx, cfg, db, log, reg, false); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	for _, name := range []string{"nova_auditor_bytes_total", "nova_auditor_settled_objects_total", "nova_auditor_slots_reaped_total"} {
		if !have[name] {
			t.Errorf("%s is not registered after wiring", name)
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a second wiring on the same registry panicked: %v", r)
			}
		}()
		_, _, err = buildCycle(ctx, cfg, db, log, reg, false)
	}()
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("a second wiring on the same registry: %v, want a registration error", err)
	}
}
