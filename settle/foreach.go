package settle

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// forEach runs fn for each index of [0, n) on at most workers goroutines,
// each taking the next index until none is left or a call fails: the
// first error is returned, the context fn gets is cancelled then, and no
// index is taken after it. A single index runs on the caller's goroutine.
//
// It is errgroup's Go without a goroutine per item: an item's work goes
// down the SDK's deep call chains, and a new goroutine grows its stack
// from the start for each (runtime.newstack was about an eighth of a
// long-tail cycle's CPU). A worker's stack, grown once, serves its items,
// and an object's single piece to read (the common case) is read without
// a goroutine. A batch's streams (settleBatch) keep a goroutine each: all
// of a batch's PUTs then wait for the settle's slots at once, finish
// together and commit in few groups; on workers they interleaved with the
// next batch's plans, and the long-tail benchmark measured more commits
// (0.14 to 0.17 per object) and more CPU, not less.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	switch {
	case n <= 0:
		return nil
	case n == 1 || workers <= 1:
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range min(n, workers) {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := fn(gctx, i); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}
