package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nova/auditor/internal/config"
)

// SizeVar defines an int64 flag in bytes that takes binary suffixes
// (512, 64KiB, 8MiB): config.ParseSize, the configuration's one size syntax.
func (f *Flags) SizeVar(p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(sizeValue{p}, name, usage)
}

// DurationVar defines a time.Duration flag in the configuration's one
// duration syntax (config.ParseDuration: 30s, 5m, 30d, 1d12h, 2w). It
// replaces pflag's, so every duration flag takes days and weeks.
func (f *Flags) DurationVar(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var(durationValue{p}, name, usage)
}

// Duration is DurationVar of a new time.Duration.
func (f *Flags) Duration(name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	f.DurationVar(p, name, def, usage)
	return p
}

type durationValue struct{ v *time.Duration }

func (d durationValue) String() string {
	if d.v == nil {
		return "0s"
	}
	return d.v.String()
}

func (d durationValue) Type() string { return "DURATION" }

func (d durationValue) Set(v string) error {
	x, err := config.ParseDuration(v)
	if err != nil {
		return err
	}
	*d.v = x
	return nil
}

// ShareVar defines a float64 flag in [0, 1].
func (f *Flags) ShareVar(p *float64, name string, def float64, usage string) {
	*p = def
	f.Var(shareValue{p}, name, usage)
}

// SizeRangeVar defines a MIN-MAX flag of sizes (0-16KiB) with
// MIN <= MAX <= most; the flag keeps *lo and *hi when it is not given.
func (f *Flags) SizeRangeVar(lo, hi *int, name string, most int, usage string) {
	f.Var(rangeValue{lo, hi, most}, name, usage)
}

type sizeValue struct{ v *int64 }

func (s sizeValue) String() string {
	if s.v == nil {
		return "0"
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s sizeValue) Type() string { return "SIZE" }

func (s sizeValue) Set(v string) error {
	n, err := config.ParseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

type shareValue struct{ v *float64 }

func (s shareValue) String() string {
	if s.v == nil {
		return "0"
	}
	return strconv.FormatFloat(*s.v, 'g', -1, 64)
}

func (s shareValue) Type() string { return "SHARE" }

func (s shareValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x >= 0 && x <= 1) {
		return fmt.Errorf("%q is not a share in [0, 1]", v)
	}
	*s.v = x
	return nil
}

type rangeValue struct {
	lo, hi *int
	most   int
}

func (r rangeValue) String() string {
	if r.lo == nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", *r.lo, *r.hi)
}

func (r rangeValue) Type() string { return "MIN-MAX" }

func (r rangeValue) Set(v string) error {
	a, b, ok := strings.Cut(v, "-")
	if !ok {
		return fmt.Errorf("%q is not MIN-MAX (like 0-16KiB)", v)
	}
	lo, err := config.ParseSize(a)
	if err != nil {
		return err
	}
	hi, err := config.ParseSize(b)
	if err != nil {
		return err
	}
	if lo > hi || hi > int64(r.most) {
		return fmt.Errorf("%q: want MIN <= MAX <= %s", v, sizeString(int64(r.most)))
	}
	*r.lo, *r.hi = int(lo), int(hi)
	return nil
}

// sizeString is n with the largest binary suffix that divides it (64MiB).
func sizeString(n int64) string {
	for _, suf := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n > 0 && n%suf.m == 0 {
			return strconv.FormatInt(n/suf.m, 10) + suf.s
		}
	}
	return strconv.FormatInt(n, 10)
}
