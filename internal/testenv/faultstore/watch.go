package faultstore

import (
	"context"
	"fmt"
	"hash/crc32"

	"github.com/nova/auditor/objstore"
)

// watch reads the object at bucket/key back and compares its CRC with the
// one first seen there.
func (in *Injector) watch(ctx context.Context, s objstore.Store, bucket, key string) {
	ctx = context.WithoutCancel(ctx)
	a, err := s.Head(ctx, bucket, key)
	if err != nil || a.Size == 0 {
		return
	}
	b, _, err := s.GetRange(ctx, bucket, key, 0, a.Size)
	if err != nil {
		return
	}
	c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	in.mu.Lock()
	defer in.mu.Unlock()
	k := bucket + "/" + key
	if old, ok := in.crc[k]; ok && old != c {
		in.problems = append(in.problems, fmt.Sprintf("overwrite: %s holds other bytes than first written there", k))
	}
	if _, ok := in.crc[k]; !ok {
		in.crc[k] = c
	}
}

// Watch checks bucket/key against the bytes first seen there (the oracle
// calls it for every object it finds).
func (in *Injector) Watch(ctx context.Context, s objstore.Store, bucket, key string) {
	in.watch(ctx, s, bucket, key)
}

func (in *Injector) problem(p string) {
	in.mu.Lock()
	in.problems = append(in.problems, p)
	in.mu.Unlock()
}

// Forget drops what the watch knows of bucket/key: the explorer damaged
// it on purpose, and its next bytes are not an overwrite.
func (in *Injector) Forget(bucket, key string) {
	in.mu.Lock()
	delete(in.crc, bucket+"/"+key)
	in.mu.Unlock()
}
