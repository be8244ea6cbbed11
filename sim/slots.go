package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// errTaken means a slot holds another writer's object: the seq is taken.
type errTaken struct {
	key   string
	nonce uint64
	kind  bundlefmt.Kind
}

func (e *errTaken) Error() string {
	return fmt.Sprintf("slot %s is taken by another writer (a %s with nonce %016x)", e.key, e.kind, e.nonce)
}

// isTaken reports whether err says the seq is taken by another writer.
func isTaken(err error) bool {
	var t *errTaken
	return errors.As(err, &t)
}

// errReplyLost stands for a PUT whose reply never arrived (the lost-reply
// fault): the object may or may not have landed.
var errReplyLost = errors.New("PUT reply lost")

// putAttempts bounds the retries of one slot PUT after ambiguous failures.
const putAttempts = 8

// chain is one star's chain: its slot keys in the buckets that hold them
// (the standard bucket, or every bucket of the express set).
type chain struct {
	store   Store
	star    string
	buckets []string
}

func (c chain) key(epoch, seq int64) string {
	return bundlefmt.SlotKey(c.star, uint64(epoch), uint64(seq))
}

// putSlot writes a slot create-once in every bucket of the chain and returns
// nil once every bucket holds this writer's object (recognised by nonce,
// epoch, seq and size), *errTaken when any bucket holds another writer's.
// It never gives up on the seq for a transient failure: it reads the slot
// back and retries the PUT while the key is free (docs/metastore.md: after an
// ambiguous PUT failure the writer reads the slot back and compares the
// nonce; it never skips a seq). loseReply drops the first successful reply.
// landed is how many buckets hold this writer's copy (on an express star a
// taken seq may still hold some: a slot never absorbed, whose copies differ).
func (c chain) putSlot(ctx context.Context, epoch, seq int64, nonce uint64, data []byte, loseReply bool) (landed int, err error) {
	key := c.key(epoch, seq)
	if len(c.buckets) == 1 {
		err := c.putOne(ctx, c.buckets[0], key, epoch, seq, nonce, data, loseReply)
		if err == nil {
			return 1, nil
		}
		return 0, err
	}
	first := c.buckets[0]
	errs := objstore.EachBucket(c.buckets, func(b string) error {
		return c.putOne(ctx, b, key, epoch, seq, nonce, data, loseReply && b == first)
	})
	for _, err := range errs {
		if err == nil {
			landed++
		}
	}
	// A 412 in any bucket means the seq is taken (docs/metastore.md, express).
	for _, err := range errs {
		if isTaken(err) {
			return landed, err
		}
	}
	return landed, errors.Join(errs...)
}

func (c chain) putOne(ctx context.Context, bucket, key string, epoch, seq int64, nonce uint64, data []byte, loseReply bool) error {
	var last error
	for attempt := 0; attempt < putAttempts; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		err := c.store.PutIfAbsent(ctx, bucket, key, data)
		if err == nil && loseReply && attempt == 0 {
			err = errReplyLost
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if errors.Is(err, objstore.ErrBucketNotFound) || errors.Is(err, objstore.ErrInvalidKey) {
			return fmt.Errorf("PUT %s in %s: %w", key, bucket, err)
		}
		exists := isExists(err)
		// The key is taken, or the PUT's fate is unknown: read the slot back.
		env, rerr := c.readEnvelope(ctx, bucket, key)
		switch {
		case rerr == nil && env.Nonce == nonce && env.Epoch == uint64(epoch) && env.Seq == uint64(seq) &&
			env.ObjectSize == uint64(len(data)):
			return nil // our own slot: the PUT landed
		case rerr == nil:
			return &errTaken{key: key, nonce: env.Nonce, kind: env.Kind}
		case isNotFound(rerr) && !exists:
			last = err // the PUT did not land: try again, the same seq
		case bundlefmt.ClassOf(rerr) != "":
			// Something that is not a slot stands at the key: taken all the same.
			return &errTaken{key: key, kind: bundlefmt.KindUnknown}
		default:
			last = fmt.Errorf("read back %s after %v: %w", key, err, rerr)
		}
	}
	return fmt.Errorf("PUT %s in %s: gave up after %d attempts: %w", key, bucket, putAttempts, last)
}

// readEnvelope reads and decodes a slot's envelope.
func (c chain) readEnvelope(ctx context.Context, bucket, key string) (bundlefmt.Envelope, error) {
	b, _, err := c.store.GetRange(ctx, bucket, key, 0, bundlefmt.EnvelopeSize)
	if err != nil {
		return bundlefmt.Envelope{}, err
	}
	return bundlefmt.DecodeEnvelope(key, b)
}

func backoff(attempt int) time.Duration {
	d := 20 * time.Millisecond << min(attempt, 6)
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
