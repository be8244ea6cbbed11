package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nova/auditor/internal/testenv/faultstore"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// traffic makes the same requests every time: puts, reads, deletes and a
// listing, and returns what the caller saw of each.
func traffic(t *testing.T, s objstore.Store, bucket string) []string {
	t.Helper()
	ctx := context.Background()
	var seen []string
	for i := range 40 {
		key := fmt.Sprintf("k/%d", i%10)
		var err error
		switch i % 4 {
		case 0:
			err = s.PutIfAbsent(ctx, bucket, key, []byte(key))
		case 1:
			_, _, err = s.GetRange(ctx, bucket, key, 0, 10)
		case 2:
			err = s.Delete(ctx, bucket, []string{key})
		case 3:
			err = s.List(ctx, bucket, "k/", func(objstore.ObjectInfo) error { return nil })
		}
		seen = append(seen, fmt.Sprint(err != nil, objstore.IsRetryable(err)))
	}
	return seen
}

// TestReplayTakesTheSameFaults: a schedule recorded under a seed, replayed
// on a fresh store, injects the same faults at the same requests, and the
// caller sees the same answers.
func TestReplayTakesTheSameFaults(t *testing.T) {
	b := teststore.File(t, teststore.Options{})
	in := faultstore.New(faultstore.Config{Seed: 7, Rate: 0.5})
	first := traffic(t, in.Wrap(b.Store, nil), b.Std)
	sched := in.Decisions()
	if len(sched) < 5 {
		t.Fatalf("only %d faults at rate 0.5 over 40 requests", len(sched))
	}
	b2 := teststore.File(t, teststore.Options{})
	re := faultstore.Replay(sched)
	second := traffic(t, re.Wrap(b2.Store, nil), b2.Std)
	if m, n := re.Matched(); m != n {
		t.Errorf("replay matched %d of %d faults", m, n)
	}
	got := re.Decisions()
	for i := range got {
		got[i].Index = sched[i].Index
	}
	if !slices.Equal(got, sched) {
		t.Errorf("replayed faults differ:\n%v\n%v", got, sched)
	}
	if !slices.Equal(first, second) {
		t.Errorf("the caller saw other answers:\n%v\n%v", first, second)
	}
}

// TestReplayKeepsToTheKindsDrawn: a replay injects a scheduled fault only
// while its kind is drawn: after SetKinds (the quiescing cycles), a request
// the run met earlier takes no fault of another kind.
func TestReplayKeepsToTheKindsDrawn(t *testing.T) {
	b := teststore.File(t, teststore.Options{})
	re := faultstore.Replay([]faultstore.Decision{
		{Op: "Delete", Key: "a", Nth: 1, Kind: faultstore.FailBefore},
		{Op: "Delete", Key: "b", Nth: 1, Kind: faultstore.LateDelete},
	})
	re.SetKinds(faultstore.LateDelete)
	s := re.Wrap(b.Store, nil)
	for _, key := range []string{"a", "b"} {
		if err := s.Delete(context.Background(), b.Std, []string{key}); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
	}
	got := re.Decisions()
	if len(got) != 1 || got[0].Key != "b" || got[0].Kind != faultstore.LateDelete {
		t.Fatalf("faults injected %v, want the late DELETE of b only", got)
	}
}

// TestGateAndWatch: a killed gate sends nothing; an object written again
// with other bytes, and a late DELETE landing after a later write of its
// key, are reported.
func TestGateAndWatch(t *testing.T) {
	ctx := context.Background()
	b := teststore.File(t, teststore.Options{})
	in := faultstore.Replay([]faultstore.Decision{{Op: "Delete", Key: "a", Nth: 1, Kind: faultstore.LateDelete}})
	g := &faultstore.Gate{}
	s := in.Wrap(b.Store, g)
	if err := s.PutIfAbsent(ctx, b.Std, "a", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, b.Std, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, b.Std, "a", []byte("two")); err != nil {
		t.Fatal(err)
	}
	ps := in.Problems()
	if len(ps) != 2 || !strings.Contains(ps[0], "overwrite") || !strings.Contains(ps[1], "late DELETE") {
		t.Fatalf("problems %q", ps)
	}
	if _, err := b.Store.Head(ctx, b.Std, "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the late DELETE did not land: %v", err)
	}
	g.Kill()
	if err := s.PutIfAbsent(ctx, b.Std, "b", []byte("x")); !errors.Is(err, faultstore.ErrDead) {
		t.Fatalf("a dead caller's PUT: %v", err)
	}
	if _, err := b.Store.Head(ctx, b.Std, "b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a dead caller's PUT landed: %v", err)
	}
}
