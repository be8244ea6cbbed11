package objstore

import "time"

// SetClock replaces the set's clock (its hold-off of down buckets).
func SetClock(s *BucketSet, now func() time.Time) { s.now = now }

func SetHealthClock(h *Health, now func() time.Time) { h.now = now }
