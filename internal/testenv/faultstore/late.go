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

// deleted sends the held PUTs of the keys a DELETE removed.
func (in *Injector) deleted(ctx context.Context, bucket string, keys []string) {
	in.mu.Lock()
	var due []heldPut
	keep := in.heldPuts[:0]
	for _, h := range in.heldPuts {
		if h.bucket == bucket && slices.Contains(keys, h.key) {
			due = append(due, h)
			continue
		}
		keep = append(keep, h)
	}
	in.heldPuts = keep
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
	var due []held
	keep := in.held[:0]
	for _, h := range in.held {
		if h.bucket == bucket && slices.Contains(h.keys, key) {
			due = append(due, h)
			continue
		}
		keep = append(keep, h)
	}
	in.held = keep
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
