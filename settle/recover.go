package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// recoverIntents is step 1 of the cycle for publish intents left open by a
// crash. A live intent (its key is still the next object its stream would
// publish: a new object at settled_through, or the rewrite of the stream's
// last entry) is kept: the stream's next settle resumes its upload from the
// staged parts, or adopts the standing object on 412, onto the same key. A
// stale intent can never be published again (settled_through and revisions
// only grow), so its upload is aborted and it becomes a reap intent: the
// reap step deletes its object after the grace unless the catalog references
// the key. Then the pending sidecars are reconciled against what stays open.
func (s *Settler) recoverIntents(ctx context.Context, f catalog.Fence) error {
	intents, err := s.d.DB.Intents(ctx, f.Star, "publish", s.c.ReapGrace)
	if err != nil {
		return err
	}
	for _, in := range intents {
		live, err := s.intentLive(ctx, in)
		if err != nil {
			return err
		}
		if live {
			continue
		}
		if in.UploadID != "" {
			if err := s.store.AbortAssembly(ctx, s.d.Topology.Standard(), in.ObjectKey, in.UploadID); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("abort stale upload of %s: %w", in.ObjectKey, err)
			}
		}
		// and any upload whose ID a crash kept from being recorded
		if err := s.abortUploads(ctx, in.ObjectKey, ""); err != nil {
			return err
		}
		if err := s.d.DB.AbandonPublish(ctx, f, in.ID, s.c.ReapGrace); err != nil {
			return err
		}
		s.d.Log.Info("stale publish intent abandoned", "key", in.ObjectKey, "intent", in.ID)
	}
	return s.reconcile(ctx, f)
}

func (s *Settler) intentLive(ctx context.Context, in catalog.Intent) (bool, error) {
	k, err := bundlefmt.ParseSettledKey(in.ObjectKey)
	if err != nil {
		return false, nil // not a key we would write
	}
	st, err := s.d.DB.Stream(ctx, k.Stream)
	if errors.Is(err, catalog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Bucket != k.Bucket || uint64(st.Epoch) != k.StreamEpoch {
		return false, nil
	}
	waiting := st.SettledThrough < st.NextRecord
	// The entry at the key's first record, if any, decides what the key
	// would be: a rewrite of that entry, or a new run. Revisions above the
	// planned one are normal: an intent opens above every revision its base
	// used before (docs/architecture.md#no-late-delete).
	ens, err := s.d.DB.EntriesIntersecting(ctx, st.ID, st.Epoch, int64(k.FirstRecord), int64(k.FirstRecord)+1)
	if err != nil {
		return false, err
	}
	if len(ens) == 0 {
		// a new run at settled_through, or above it up to low_record where
		// retention left a gap (what resolve and CommitSettle allow)
		return waiting && (uint64(st.SettledThrough) == k.FirstRecord ||
			(k.FirstRecord > uint64(st.SettledThrough) && k.FirstRecord <= uint64(st.LowRecord))), nil
	}
	// A rewrite above the entry's revision: settle's tail rewrite of the
	// stream's last entry (it ends at settled_through) while records wait
	// to settle, or the erasure step's rewrite of an entry a pending
	// erasure intersects. The two cannot be told apart here: a tail
	// rewrite settle gave up (the entry is no longer the last) stays live
	// while such an erasure is pending, and the erasure step buries it
	// when it meets its object (Eraser.rewriteEntry).
	if len(ens) != 1 || uint64(ens[0].FirstRecord) != k.FirstRecord || uint32(ens[0].Revision) >= k.Revision {
		return false, nil
	}
	en := ens[0]
	if waiting && en.EndRecord() == st.SettledThrough {
		return true, nil
	}
	ers, err := s.d.DB.ErasuresOf(ctx, st.ID, en.FirstRecord, en.EndRecord())
	if err != nil {
		return false, err
	}
	for _, e := range ers {
		if !e.Applied {
			return true, nil
		}
	}
	return false, nil
}

// Idle implements cycle.Idler: a standby reconciles its pending sidecars
// against the open intents, so the parts it staged while it led go once
// another leader has finished those intents (only a read of the
// metastore; a sidecar dropped too early is rebuilt from source).
func (s *Settler) Idle(ctx context.Context, star string) error {
	return s.reconcile(ctx, catalog.Fence{Star: star})
}

var _ cycle.Idler = (*Settler)(nil)

// reconcile keeps exactly the sidecars of the open publish intents' staged
// parts (docs/architecture.md#local-pending-sidecars).
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
