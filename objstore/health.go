package objstore

import (
	"sync"
	"time"
)

// Health is the one memory, shared by slot reads, copy sources and deletes,
// of which buckets are failing (a zone that is down or stalls). A bucket
// that failed is held off: reads and copies try it last, deletes skip it,
// so an outage costs one detection, not one per request. The hold-off is
// at least as long as the failure took to detect (a stalled zone is found
// only after attempts x the attempt timeout, and holding it off for less
// would spend most of the outage waiting on it again) and doubles while the
// bucket keeps failing, up to a maximum; a success clears it. It lasts
// across cycles for as long as the process runs.
type Health struct {
	min, max time.Duration
	now      func() time.Time

	mu    sync.Mutex
	state map[string]*heldOff
}

type heldOff struct {
	until time.Time
	hold  time.Duration
	fails int
}

// Hold-off bounds the auditor uses: a failed bucket is held off for at
// least HoldOffMin, and at most HoldOffMax however long it stays bad.
const (
	HoldOffMin = 30 * time.Second
	HoldOffMax = 15 * time.Minute
)

// NewHealth returns an empty health record with hold-offs in [min, max]
// (min 0: never hold off).
func NewHealth(min, max time.Duration) *Health {
	return &Health{min: min, max: max, state: map[string]*heldOff{}}
}

func (h *Health) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// Failed records a failure of bucket that took took to detect.
func (h *Health) Failed(bucket string, took time.Duration) {
	if h == nil || h.min <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	if st == nil {
		st = &heldOff{}
		h.state[bucket] = st
	}
	hold := max(h.min, took, 2*st.hold)
	if h.max > 0 {
		hold = min(hold, max(h.max, took))
	}
	st.hold, st.fails = hold, st.fails+1
	st.until = h.clock().Add(hold)
}

// Succeeded clears bucket's hold-off.
func (h *Health) Succeeded(bucket string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.state, bucket)
}

// Down reports whether bucket is held off now.
func (h *Health) Down(bucket string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	return st != nil && h.clock().Before(st.until)
}

// HeldOff returns bucket's hold-off now (0 when it is not held off) and its
// failures in a row.
func (h *Health) HeldOff(bucket string) (time.Duration, int) {
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	if st == nil {
		return 0, 0
	}
	left := st.until.Sub(h.clock())
	if left < 0 {
		left = 0
	}
	return left, st.fails
}
