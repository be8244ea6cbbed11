package faultstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nova/auditor/objstore"
)

// Gate stops one leader's requests for good when it "crashes": a request
// made through a gated store after Kill is never sent.
type Gate struct{ dead atomic.Bool }

// Kill closes the gate.
func (g *Gate) Kill() { g.dead.Store(true) }

// Dead reports whether the gate is closed.
func (g *Gate) Dead() bool { return g != nil && g.dead.Load() }

// ErrDead is the answer to a request made after the gate closed.
var ErrDead = errors.New("faultstore: the caller is dead, the request was never sent")

// transient is a retryable failure as a backend reports it.
func transient(op string, err error) error { return &objstore.TransientError{Op: op, Err: err} }

var (
	errInjected = errors.New("injected: connection reset before the request was sent")
	errTimeout  = fmt.Errorf("injected: the reply was lost: %w", context.DeadlineExceeded)
)

// Wrap is a Store over s whose requests take the injector's faults and,
// with a gate, stop when it is killed.
func (in *Injector) Wrap(s objstore.Store, g *Gate) objstore.Store {
	return &store{in: in, s: s, gate: g}
}

type store struct {
	in   *Injector
	s    objstore.Store
	gate *Gate
}

var _ objstore.Store = (*store)(nil)

// Limits are the wrapped store's part-planning limits.
func (f *store) Limits() objstore.Limits {
	if l, ok := f.s.(interface{ Limits() objstore.Limits }); ok {
		return l.Limits()
	}
	return objstore.DefaultLimits
}

// do runs one request under its fault: send it (once, twice, or not at
// all) and return the reply the caller sees.
func (f *store) do(ctx context.Context, op, bucket, key string, send func() error, late ...func()) error {
	if f.gate.Dead() {
		return ErrDead
	}
	d, faulty := f.in.decide(op, bucket, key)
	if !faulty {
		return send()
	}
	switch d.Kind {
	case LatePut:
		err := send()
		if err == nil {
			for _, fn := range late {
				fn()
			}
		}
		return err
	case Delay:
		t := time.NewTimer(time.Duration(d.Arg) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if f.gate.Dead() {
			return ErrDead
		}
		return send()
	case FailBefore:
		return transient(op, errInjected)
	case LostReply:
		_ = send()
		return transient(op, errTimeout)
	case Duplicate:
		_ = send()
		if f.gate.Dead() {
			return ErrDead
		}
		return send()
	}
	return send() // the kinds the operation handles itself
}

func (f *store) GetRange(ctx context.Context, bucket, key string, off, n int64) (data []byte, size int64, err error) {
	err = f.do(ctx, "GetRange", bucket, key, func() error {
		var e error
		data, size, e = f.s.GetRange(ctx, bucket, key, off, n)
		return e
	})
	return data, size, err
}

func (f *store) GetSuffix(ctx context.Context, bucket, key string, n int64) (data []byte, size int64, err error) {
	err = f.do(ctx, "GetSuffix", bucket, key, func() error {
		var e error
		data, size, e = f.s.GetSuffix(ctx, bucket, key, n)
		return e
	})
	return data, size, err
}

func (f *store) Head(ctx context.Context, bucket, key string) (a objstore.Attrs, err error) {
	err = f.do(ctx, "Head", bucket, key, func() error {
		var e error
		a, e = f.s.Head(ctx, bucket, key)
		return e
	})
	return a, err
}

func (f *store) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	return f.do(ctx, "PutIfAbsent", bucket, key, func() error {
		err := f.s.PutIfAbsent(ctx, bucket, key, data)
		if err == nil {
			f.in.written(ctx, f.s, bucket, key)
		}
		return err
	}, func() { f.in.late(f.s, bucket, key, data) })
}

func (f *store) Assemble(ctx context.Context, req objstore.AssembleRequest) (res objstore.AssembleResult, err error) {
	first := true
	err = f.do(ctx, "Assemble", req.Bucket, req.Key, func() error {
		r := req
		if !first {
			// The second delivery of a completed assembly: a complete sent
			// again onto the key its first copy took (ErrExists, with
			// the new upload left open for the caller to abort). It runs
			// no hooks: the caller's progress is the first copy's.
			r.UploadID, r.Stager, r.Hooks = "", nil, objstore.Hooks{}
		}
		first = false
		var e error
		res, e = f.s.Assemble(ctx, r)
		if e == nil {
			f.in.written(ctx, f.s, req.Bucket, req.Key)
		}
		return e
	}, func() {
		// The object's bytes, as the one PUT that wrote it would send
		// them again.
		a, err := f.s.Head(ctx, req.Bucket, req.Key)
		if err != nil {
			return
		}
		if data, _, err := f.s.GetRange(ctx, req.Bucket, req.Key, 0, a.Size); err == nil {
			f.in.late(f.s, req.Bucket, req.Key, data)
		}
	})
	return res, err
}

func (f *store) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	return f.do(ctx, "AbortAssembly", bucket, key, func() error { return f.s.AbortAssembly(ctx, bucket, key, uploadID) })
}

func (f *store) ListParts(ctx context.Context, bucket, key, uploadID string) (parts []objstore.PartInfo, err error) {
	err = f.do(ctx, "ListParts", bucket, key, func() error {
		var e error
		parts, e = f.s.ListParts(ctx, bucket, key, uploadID)
		return e
	})
	return parts, err
}

func (f *store) ListAssemblies(ctx context.Context, bucket, key string) (ids []string, err error) {
	err = f.do(ctx, "ListAssemblies", bucket, key, func() error {
		var e error
		ids, e = f.s.ListAssemblies(ctx, bucket, key)
		return e
	})
	return ids, err
}

func (f *store) Delete(ctx context.Context, bucket string, keys []string) error {
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	if f.gate.Dead() {
		return ErrDead
	}
	d, faulty := f.in.decide("Delete", bucket, first)
	send := func() error {
		err := f.s.Delete(ctx, bucket, keys)
		if err == nil {
			f.in.deleted(ctx, bucket, keys)
		}
		return err
	}
	if !faulty {
		return send()
	}
	switch d.Kind {
	case LateDelete:
		err := send()
		f.in.mu.Lock()
		f.in.held = append(f.in.held, held{store: f.s, bucket: bucket, keys: slices.Clone(keys)})
		f.in.mu.Unlock()
		return err
	case Delay:
		time.Sleep(time.Duration(d.Arg) * time.Millisecond)
		return send()
	case FailBefore:
		return transient("Delete", errInjected)
	case LostReply:
		_ = send()
		return transient("Delete", errTimeout)
	case Duplicate:
		_ = send()
		return send()
	}
	return send()
}

func (f *store) List(ctx context.Context, bucket, prefix string, each func(objstore.ObjectInfo) error) error {
	if f.gate.Dead() {
		return ErrDead
	}
	fn := func(o objstore.ObjectInfo) error { return each(f.in.aged(o)) }
	d, faulty := f.in.decide("List", bucket, prefix)
	if !faulty {
		return f.s.List(ctx, bucket, prefix, fn)
	}
	switch d.Kind {
	case Delay:
		time.Sleep(time.Duration(d.Arg) * time.Millisecond)
		return f.s.List(ctx, bucket, prefix, fn)
	case FailBefore:
		return transient("ListObjectsV2", errInjected)
	case ListError:
		n := 0
		err := f.s.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
			if n == d.Arg%4 {
				return transient("ListObjectsV2", errInjected)
			}
			n++
			return fn(o)
		})
		if err == nil && n <= d.Arg%4 {
			err = transient("ListObjectsV2", errInjected)
		}
		return err
	case ListPaged:
		var all []objstore.ObjectInfo
		if err := f.s.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
			all = append(all, o)
			return nil
		}); err != nil {
			return err
		}
		rnd := rand.New(rand.NewPCG(uint64(d.Arg), uint64(len(all))))
		rnd.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for i, o := range all {
			if i > 0 && rnd.IntN(3) == 0 {
				time.Sleep(time.Millisecond) // a page boundary: the store may change meanwhile
			}
			if err := fn(o); err != nil {
				return err
			}
		}
		return nil
	}
	return f.s.List(ctx, bucket, prefix, fn)
}
