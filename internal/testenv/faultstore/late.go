package faultstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nova/auditor/objstore"
)

// late holds a PUT the caller got its reply for, to be sent again right
// after the next DELETE of its key: an SDK retry that outlived the
// object's reap, which leaves a stray.
func (in *Injector) late(s objstore.Store, bucket, key string, data []byte) {
	in.mu.Lock()
	in.heldPuts = append(in.heldPuts, heldPut{store: s, bucket: bucket, key: key, data: slices.Clone(data)})
	in.mu.Unlock()
}

// takeDue removes from *list the held operations that are due and
// returns them, the rest kept in their order. A late PUT falls due on a
// DELETE of its key and a late DELETE on a write of one of its keys: the
// same filtering of a held list, under in.mu, by what triggered them.
func takeDue[T any](list *[]T, isDue func(T) bool) []T {
	var due []T
	keep := (*list)[:0]
	for _, h := range *list {
		if isDue(h) {
			due = append(due, h)
			continue
		}
		keep = append(keep, h)
	}
	// The tail past keep still points at the taken ones (a held PUT's
	// data): cleared, so they are not kept alive.
	clear((*list)[len(keep):])
	*list = keep
	return due
}

// deleted sends the held PUTs of the keys a DELETE removed.
func (in *Injector) deleted(ctx context.Context, bucket string, keys []string) {
	in.mu.Lock()
	due := takeDue(&in.heldPuts, func(h heldPut) bool { return h.bucket == bucket && slices.Contains(keys, h.key) })
	in.mu.Unlock()
	for _, h := range due {
		_ = h.store.PutIfAbsent(context.WithoutCancel(ctx), h.bucket, h.key, h.data) // a stray, or 412 if written again meanwhile
	}
}

// written records the bytes a write left at bucket/key and sends the late
// DELETEs held for that key.
func (in *Injector) written(ctx context.Context, s objstore.Store, bucket, key string) {
	in.watch(ctx, s, bucket, key)
	in.mu.Lock()
	due := takeDue(&in.held, func(h held) bool { return h.bucket == bucket && slices.Contains(h.keys, key) })
	in.mu.Unlock()
	for _, h := range due {
		if err := h.store.Delete(context.WithoutCancel(ctx), h.bucket, h.keys); err == nil {
			in.problem(fmt.Sprintf("a late DELETE removed %s/%s after it was written again", bucket, key))
		}
	}
}

// Flush sends every DELETE still held, late: after everything the run did
// since it was first sent.
func (in *Injector) Flush(ctx context.Context) error {
	in.mu.Lock()
	due := in.held
	in.held = nil
	in.mu.Unlock()
	var errs []error
	for _, h := range due {
		errs = append(errs, h.store.Delete(ctx, h.bucket, h.keys))
	}
	return errors.Join(errs...)
}
