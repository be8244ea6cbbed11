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
// Unlike errgroup's Go it starts no goroutine per item, so a worker's
// stack, grown once down the SDK's deep call chains, serves its items. A
// batch's streams (settleBatch) keep a goroutine each so their PUTs finish
// and commit together (docs/measurements.md#figures-behind-the-code).
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
