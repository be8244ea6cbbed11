package trim

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// P is a position, shorter.
func P(e, s int64) Pos { return Pos{Epoch: e, Seq: s} }

func ep(e int64, end ...int64) catalog.StarEpoch {
	se := catalog.StarEpoch{Epoch: e, StartedAt: time.Unix(1000*e, 0)}
	if len(end) > 0 {
		se.EndSeq = &end[0]
	}
	return se
}

func held(e, s int64) *catalog.HeldSlot {
	return &catalog.HeldSlot{Slot: Pos{Epoch: e, Seq: s}, Stream: catalog.StreamID{15: 1}, FirstRecord: 7}
}

func state(head Pos, epochs ...catalog.StarEpoch) catalog.TrimState {
	return catalog.TrimState{Star: catalog.Star{Star: "s", ChainClass: "standard", Epoch: head.Epoch, NextSeq: head.Seq}, Epochs: epochs}
}

func withCursor(st catalog.TrimState, p Pos) catalog.TrimState {
	st.Cursor, st.HasCursor = p, true
	return st
}

func TestDecide(t *testing.T) {
	type want struct {
		cursor, bound Pos
		move          bool
		slots         int64
		fence         int64 // epoch trim waits at (0: none)
		bounding      bool  // quarantine is the bound
		halt          string
	}
	cases := []struct {
		name string
		st   catalog.TrimState
		want want
	}{
		{"no cursor no refs: up to the head", state(P(1, 5), ep(1)),
			want{cursor: P(1, 0), bound: P(1, 5), move: true, slots: 5}},
		{"empty chain", state(P(1, 0), ep(1)),
			want{cursor: P(1, 0), bound: P(1, 0)}},
		{"the earliest ref holds", func() catalog.TrimState { s := state(P(1, 9), ep(1)); s.RefMin = held(1, 2); return s }(),
			want{cursor: P(1, 0), bound: P(1, 2), move: true, slots: 2}},
		{"a ref at the cursor: no move", func() catalog.TrimState {
			s := withCursor(state(P(1, 9), ep(1)), P(1, 2))
			s.RefMin = held(1, 2)
			return s
		}(), want{cursor: P(1, 2), bound: P(1, 2)}},
		{"across a finished fence, poison and lost slots included", state(P(3, 2), ep(1, 7), ep(2, 4), ep(3)),
			want{cursor: P(1, 0), bound: P(3, 2), move: true, slots: 7 + 4 + 2}},
		{"cursor stored at an epoch's end is the next epoch's start", withCursor(state(P(2, 3), ep(1, 7), ep(2)), P(1, 7)),
			want{cursor: P(2, 0), bound: P(2, 3), move: true, slots: 3}},
		{"a fenced last epoch: the head at its end is the next epoch's start", state(P(2, 4), ep(1, 3), ep(2, 4)),
			want{cursor: P(1, 0), bound: P(3, 0), move: true, slots: 7}},
		{"lowest epoch above 1", state(P(5, 1), ep(4, 2), ep(5)),
			want{cursor: P(4, 0), bound: P(5, 1), move: true, slots: 3}},
		{"fence in progress: nothing of its epoch", state(P(2, 4), ep(1), ep(2)),
			want{cursor: P(1, 0), bound: P(1, 0), fence: 1}},
		{"fence in progress with the cursor inside the epoch: wait, no halt", withCursor(state(P(2, 4), ep(1), ep(2)), P(1, 3)),
			want{cursor: P(1, 3), bound: P(1, 0), fence: 1}},
		{"fence in progress after a finished one", state(P(3, 4), ep(1, 5), ep(2), ep(3)),
			want{cursor: P(1, 0), bound: P(2, 0), move: true, slots: 5, fence: 2}},
		{"quarantine bounding", func() catalog.TrimState {
			s := state(P(1, 9), ep(1))
			s.RefMin, s.QuarantineMin, s.QuarantinedStreams = held(1, 3), held(1, 3), 1
			return s
		}(), want{cursor: P(1, 0), bound: P(1, 3), move: true, slots: 3, bounding: true}},
		{"quarantine behind another ref", func() catalog.TrimState {
			s := state(P(1, 9), ep(1))
			s.RefMin, s.QuarantineMin = held(1, 1), held(1, 3)
			return s
		}(), want{cursor: P(1, 0), bound: P(1, 1), move: true, slots: 1}},
		{"a ref behind the cursor is a halt", func() catalog.TrimState {
			s := withCursor(state(P(1, 9), ep(1)), P(1, 4))
			s.RefMin = held(1, 3)
			return s
		}(), want{halt: "behind the trim cursor"}},
		{"a ref past its epoch's end is a halt", func() catalog.TrimState {
			s := state(P(2, 9), ep(1, 4), ep(2))
			s.RefMin = held(1, 4)
			return s
		}(), want{halt: "past the end"}},
		{"a ref in no epoch is a halt", func() catalog.TrimState {
			s := state(P(2, 9), ep(1, 4), ep(2))
			s.RefMin = held(3, 0)
			return s
		}(), want{halt: "in no epoch"}},
		{"cursor past the head is a halt", withCursor(state(P(1, 2), ep(1)), P(1, 3)), want{halt: "past the absorbed head"}},
		{"cursor past its epoch's end is a halt", withCursor(state(P(2, 2), ep(1, 4), ep(2)), P(1, 5)), want{halt: "past the end"}},
		{"epochs not dense is a halt", state(P(3, 0), ep(1, 4), ep(3)), want{halt: "not dense"}},
		{"head epoch not the last is a halt", state(P(1, 0), ep(1, 4), ep(2)), want{halt: "current epoch"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.st)
			if tc.want.halt != "" {
				if !errors.Is(err, cycle.ErrHalt) || !strings.Contains(err.Error(), tc.want.halt) {
					t.Fatalf("want a halt (%s), got %v", tc.want.halt, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fence := int64(0)
			if d.FenceWait != nil {
				fence = d.FenceWait.Epoch
			}
			bounding := d.Quarantine != nil && d.Quarantine.Bounding
			if d.Cursor != tc.want.cursor || d.Bound != tc.want.bound || d.Move != tc.want.move || d.Slots != tc.want.slots ||
				fence != tc.want.fence || bounding != tc.want.bounding {
				t.Fatalf("got cursor %s bound %s move %v slots %d fence %d bounding %v; want %+v",
					d.Cursor, d.Bound, d.Move, d.Slots, fence, bounding, tc.want)
			}
		})
	}
}

func TestBatchesEnumerateAcrossEpochs(t *testing.T) {
	c, err := newChain(catalog.Star{Star: "s", Epoch: 4, NextSeq: 9}, []catalog.StarEpoch{ep(1, 3), ep(2, 0+1), ep(3, 2), ep(4)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var firsts []Pos
	err = c.batches(P(1, 1), P(4, 2), 2, func(b batch) error {
		firsts = append(firsts, b.first)
		for _, k := range b.keys {
			got = append(got, k[len("stars/s/chain/"):])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range []Pos{P(1, 1), P(1, 2), P(2, 0), P(3, 0), P(3, 1), P(4, 0), P(4, 1)} {
		want = append(want, fmt.Sprintf("%020d/%020d", p.Epoch, p.Seq))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("keys:\n got %v\nwant %v", got, want)
	}
	if fmt.Sprint(firsts) != "[1/1 2/0 3/1 4/1]" {
		t.Fatalf("batch starts: %v", firsts)
	}
	if n, err := c.count(P(1, 1), P(4, 2)); err != nil || n != 7 {
		t.Fatalf("count: %d %v", n, err)
	}
	if n, _ := c.count(P(2, 0), P(2, 0)); n != 0 {
		t.Fatalf("empty range counts %d", n)
	}
	// A range through an epoch without end_seq is corrupt: halt.
	c2, _ := newChain(catalog.Star{Star: "s", Epoch: 2, NextSeq: 1}, []catalog.StarEpoch{ep(1), ep(2)})
	if _, err := c2.count(P(1, 0), P(2, 1)); !errors.Is(err, cycle.ErrHalt) {
		t.Fatalf("range through a fence in progress: %v", err)
	}
}

func TestNormalise(t *testing.T) {
	c, _ := newChain(catalog.Star{Star: "s", Epoch: 4}, []catalog.StarEpoch{ep(1, 3), ep(2, 1), ep(3, 2), ep(4)})
	for _, tc := range []struct{ in, out Pos }{
		{P(1, 3), P(2, 0)}, {P(2, 1), P(3, 0)}, {P(3, 2), P(4, 0)}, {P(1, 2), P(1, 2)}, {P(4, 7), P(4, 7)},
	} {
		got, err := c.norm(tc.in)
		if err != nil || got != tc.out {
			t.Errorf("norm(%s) = %s, %v; want %s", tc.in, got, err, tc.out)
		}
	}
	for _, bad := range []Pos{P(0, 0), P(1, 4), P(1, -1)} {
		if _, err := c.norm(bad); err == nil {
			t.Errorf("norm(%s) accepted", bad)
		}
	}
}
