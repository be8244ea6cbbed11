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
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
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
	steps, policy, _, err := buildCycle(ctx, cfg, db, log, reg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 || policy != duePolicy(cfg) {
		t.Errorf("the file store's cycle: %d steps, policy %+v, want the configuration's %+v", len(steps), policy, duePolicy(cfg))
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
		_, _, _, err = buildCycle(ctx, cfg, db, log, reg, false)
	}()
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("a second wiring on the same registry: %v, want a registration error", err)
	}
}

// TestStorePolicyCoversReadBackTails: on a store that reads back what its
// assemblies copy from the auditor's own objects, every tail rewrite moves
// the whole tail through the process, and the tail-growth rule's floor is
// the output cap; on one whose server checks copies, the copy floor.
func TestStorePolicyCoversReadBackTails(t *testing.T) {
	cfg := config.Defaults()
	cfg.DenormOutputCapMiB = 64
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		tune func(*objstore.S3Config)
		want int64
	}{
		{"full object", func(c *objstore.S3Config) { c.Checksum = objstore.ChecksumFullObject }, objstore.DefaultLimits.CopyFloor()},
		{"per-part checksums, read back", func(c *objstore.S3Config) { c.Checksum, c.VerifyReadback = objstore.ChecksumParts, true }, 64 << 20},
		{"by source, CRC-32C sources read back", func(c *objstore.S3Config) {
			c.Checksum, c.VerifyReadback = objstore.ChecksumBySource, true
			c.ServerChecked = []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32, objstore.AlgorithmNone}
		}, 64 << 20},
	} {
		sc := objstore.DefaultS3Config()
		sc.Endpoint, sc.Region, sc.AccessKey, sc.SecretKey = "http://127.0.0.1:1", "us-east-1", "k", "s"
		c.tune(&sc)
		s, err := s3store.New(context.Background(), sc)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p := storePolicy(cfg, s, log)
		if p.CopyFloor != c.want {
			t.Errorf("%s: the rule's floor %d, want %d", c.name, p.CopyFloor, c.want)
		}
		if q := duePolicy(cfg); p.TailGrowth != q.TailGrowth || p.AgeCap != q.AgeCap || p.Cohorts != q.Cohorts {
			t.Errorf("%s: storePolicy %+v changed more than the floor of %+v", c.name, p, q)
		}
	}
}
