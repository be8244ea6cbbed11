package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/trim"
	"github.com/nova/auditor/verify"
)

// verifyOutput is the JSON of `auditor verify`: the fsck's report and,
// with --strays, the strays.
type verifyOutput struct {
	verify.Report
	Strays *strayReport `json:"strays,omitempty"`
}

// strayReport is what `auditor verify --strays` found
// (docs/architecture.md#strays): each stray, and what was listed.
type strayReport struct {
	trim.StrayCounts
	// Guard is --stray-guard: the sweep arms the reap of a stray older
	// than this (one that parses and lies where a reap can name it).
	Guard   float64      `json:"guard_seconds"`
	Objects []trim.Stray `json:"objects"`
}

// findStrays lists the star's streams' settled prefixes and its chain
// for strays, sorted by kind, bucket and key.
func findStrays(ctx context.Context, db *catalog.DB, rd *bundle.Reader, cfg config.Config) (*strayReport, error) {
	r := &strayReport{Guard: cfg.StrayGuard.Seconds(), Objects: []trim.Stray{}}
	counts, _, err := trim.FindStrays(ctx, db.Trim(), rd, cfg.Star, strayConfig(cfg).ListConcurrency, func(s trim.Stray) error {
		r.Objects = append(r.Objects, s)
		return nil
	})
	if err == nil && len(counts.HeldOff) > 0 {
		// A zone that failed its listing was skipped: the strays there
		// are not known, so nothing is judged (as a failed listing).
		err = fmt.Errorf("%w: the chain of star %q in %s", trim.ErrListing, cfg.Star, strings.Join(counts.HeldOff, ", "))
	}
	if err != nil {
		return nil, err
	}
	r.StrayCounts = counts
	slices.SortFunc(r.Objects, func(a, b trim.Stray) int {
		return strings.Compare(a.Kind+"\x00"+a.Bucket+"\x00"+a.Key, b.Kind+"\x00"+b.Bucket+"\x00"+b.Key)
	})
	return r, nil
}

// count is the number of strays (0 without --strays).
func (r *strayReport) count() int {
	if r == nil {
		return 0
	}
	return len(r.Objects)
}

// print writes a line per stray and the counts (nothing without --strays).
func (r *strayReport) print(w io.Writer) {
	if r == nil {
		return
	}
	guard := time.Duration(r.Guard * float64(time.Second))
	for _, s := range r.Objects {
		note := "key parses"
		switch {
		case s.Unswept != "":
			note = s.Unswept + ": never swept"
		case s.Age > guard:
			note += fmt.Sprintf(", older than the guard (%s): the next sweep arms its reap", guard)
		}
		fmt.Fprintf(w, "stray: %s %s/%s: %d bytes, %s old, %s\n", s.Kind, s.Bucket, s.Key, s.Size, s.Age.Round(time.Second), note)
	}
	fmt.Fprintf(w, "strays: %d settled, %d slots (%d keys that do not parse), listed in %d streams' settled prefixes and the chain in %d buckets\n",
		r.Settled, r.Slots, r.Unparsed, r.Streams, r.Buckets)
}
