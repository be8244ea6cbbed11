package settle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/pendingobj"
)

// Pending sidecars (docs/architecture.md#local-pending-sidecars, docs/format.md#pending-object-sidecar): every
// gathered upload part of an open publish intent is staged in a pendingobj
// store with namespace = the star and this format ID, at position
// intent_id * 10000 + part_number.
const (
	PartFormatID  = "nova-auditor-part/1"
	partMediaType = "application/octet-stream"
	maxParts      = 10000
)

// PartPosition is the sidecar position of a part of an intent.
func PartPosition(intentID int64, part int) uint64 {
	return uint64(intentID)*maxParts + uint64(part)
}

// partStager implements objstore.Stager for one publish intent.
type partStager struct {
	store  *pendingobj.Store
	intent int64
	key    string
}

func (s *partStager) name(part int) string { return s.key + "#" + strconv.Itoa(part) }

// Stage installs a part; a part already staged with the same bytes (a
// resumed assembly) is accepted. A part staged with other bytes was staged
// for an earlier plan of the same key (the write path absorbed more before
// the intent was resumed, so the part now holds other chunks): it is
// replaced, as the upload's part of that number is replaced too. A crash
// between the removal and the install leaves the part recorded as staged
// with no sidecar, which the resume rebuilds from source.
func (s *partStager) Stage(part int, data []byte) error {
	if part < 1 || part > maxParts {
		return fmt.Errorf("stage part %d of %s: part number out of range", part, s.key)
	}
	pos := PartPosition(s.intent, part)
	err := s.store.Install(pos, s.name(part), partMediaType, data)
	if errors.Is(err, fs.ErrExist) {
		old, rerr := s.Load(part)
		if rerr == nil && bytes.Equal(old, data) {
			return nil
		}
		if err := s.store.Remove(pos); err != nil {
			return fmt.Errorf("stage part %d of %s: replace the part staged for an earlier plan: %w", part, s.key, err)
		}
		err = s.store.Install(pos, s.name(part), partMediaType, data)
	}
	if err != nil {
		return fmt.Errorf("stage part %d of %s: %w", part, s.key, err)
	}
	return nil
}

// Load reads a staged part back, verified by its SHA-256 and its name.
func (s *partStager) Load(part int) ([]byte, error) {
	obj, err := s.store.Read(PartPosition(s.intent, part))
	if err != nil {
		return nil, fmt.Errorf("load staged part %d of %s: %w", part, s.key, err)
	}
	if obj.FileName != s.name(part) {
		return nil, fmt.Errorf("load staged part %d of %s: sidecar belongs to %q", part, s.key, obj.FileName)
	}
	return obj.Bytes, nil
}

// stagedPositions returns the sidecar positions of the given intents' parts.
func stagedPositions(intents map[int64][]int32) []uint64 {
	var out []uint64
	for id, parts := range intents {
		for _, p := range parts {
			out = append(out, PartPosition(id, int(p)))
		}
	}
	return out
}

// reconcilePending keeps exactly the staged parts of the open intents: it
// removes every other sidecar, and drops referenced ones that fail
// verification so they are rebuilt from source, never uploaded.
func reconcilePending(p *pendingobj.Store, positions []uint64) (dropped []uint64, err error) {
	if err := p.Reconcile(positions); err == nil {
		return nil, nil
	}
	keep := positions[:0:0]
	for _, pos := range positions {
		if _, err := p.Read(pos); err == nil {
			keep = append(keep, pos)
		} else {
			dropped = append(dropped, pos)
		}
	}
	if err := p.Reconcile(keep); err != nil {
		return dropped, fmt.Errorf("reconcile pending sidecars: %w", err)
	}
	return dropped, nil
}

// Sidecars is the cycle's sidecar step (docs/architecture.md#local-pending-sidecars),
// its last: it keeps exactly the sidecars of the open publish intents'
// staged parts, once the settle and erasure steps have opened, resumed,
// closed or abandoned intents. It runs even when an earlier step ended
// the cycle (cycle.Finally), so a star that fails at some step every cycle
// does not pile up sidecars. It runs apart from the settle so that a
// settle never lists the sidecar directory.
type Sidecars struct{ s *Settler }

// Sidecars returns the sidecar step of the Settler's pending store.
func (s *Settler) Sidecars() *Sidecars { return &Sidecars{s: s} }

// Name implements cycle.Step.
func (c *Sidecars) Name() string { return "sidecars" }

// Run implements cycle.Step; a dry run changes nothing.
func (c *Sidecars) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	if opts.DryRun {
		return cycle.Counts{}, nil
	}
	return cycle.Counts{}, c.s.reconcile(ctx, f)
}

// Finally implements cycle.Finally: the step runs after a step that ended
// the cycle.
func (c *Sidecars) Finally() {}

// Idle implements cycle.Idler: a standby reconciles its pending sidecars
// against the open intents, so the parts it staged while it led go once
// another leader has finished those intents (only a read of the
// metastore; a sidecar dropped too early is rebuilt from source).
func (c *Sidecars) Idle(ctx context.Context, star string) error {
	return c.s.reconcile(ctx, catalog.Fence{Star: star})
}

var (
	_ cycle.Finally = (*Sidecars)(nil)
	_ cycle.Idler   = (*Sidecars)(nil)
)

// reconcile keeps exactly the sidecars of the open publish intents' staged
// parts.
func (s *Settler) reconcile(ctx context.Context, f catalog.Fence) error {
	if s.d.Pending == nil {
		return nil
	}
	intents, err := s.d.DB.Intents(ctx, f.Star, "publish", s.c.ReapGrace)
	if err != nil {
		return err
	}
	staged := map[int64][]int32{}
	for _, in := range intents {
		staged[in.ID] = in.StagedParts
	}
	dropped, err := reconcilePending(s.d.Pending, stagedPositions(staged))
	for _, pos := range dropped {
		s.d.Log.Warn("staged part failed verification; it will be rebuilt from source", "position", pos)
	}
	return err
}
