package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nova/auditor/objstore"
)

// Unit is the unit a size is kept in: Bytes, KiB or MiB.
type Unit int64

// The units of size keys, by their names' suffix (none, -kib, -mib).
const (
	Bytes Unit = 1
	KiB   Unit = 1 << 10
	MiB   Unit = 1 << 20
)

func (u Unit) plural() string {
	switch u {
	case KiB:
		return "KiB"
	case MiB:
		return "MiB"
	}
	return "bytes"
}

// sizeUnits are the units a size may carry. They are all binary: K, M, G
// and T are KiB, MiB, GiB and TiB (1G = 2^30 bytes, as in the -mib and
// -kib keys), not the decimal 10^9 of SI; the decimal spellings (KB, MB,
// GB) are refused as ambiguous.
var sizeUnits = map[string]int64{
	"K": 1 << 10, "KiB": 1 << 10,
	"M": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "GiB": 1 << 30,
	"T": 1 << 40, "TiB": 1 << 40,
}

// maxSize bounds every size, in bytes, and every plain integer.
const maxSize = 1 << 62

// ParseSize is the one syntax of sizes and counts, in configuration keys
// and command-line flags alike: a plain integer, or one with a binary unit
// (K or KiB, M or MiB, G or GiB, T or TiB: G is 2^30), at least 0 and at
// most 2^62.
func ParseSize(v string) (int64, error) { return ParseSizeIn(v, Bytes) }

// ParseSizeIn parses a size kept in unit: a plain integer is already in
// unit; an integer with a unit (see ParseSize) is converted to unit and
// must be a whole number of it.
func ParseSizeIn(v string, unit Unit) (int64, error) {
	s := strings.TrimSpace(v)
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, suffix := s[:i], strings.TrimSpace(s[i:])
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(num, "-") {
			return 0, fmt.Errorf("%s is too large", v)
		}
		return 0, fmt.Errorf("%q is not an integer (like 512, 64KiB or 8M)", v)
	}
	if n < 0 {
		return 0, fmt.Errorf("%s is negative", v)
	}
	if suffix == "" {
		if n > maxSize {
			return 0, fmt.Errorf("%s is too large", v)
		}
		return n, nil
	}
	mult, ok := sizeUnits[suffix]
	if !ok && strings.Trim(suffix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ") != "" {
		return 0, fmt.Errorf("%q is not an integer (like 512, 64KiB or 8M)", v)
	}
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (K or KiB, M or MiB, G or GiB, T or TiB; all binary)", v, suffix)
	}
	if n > maxSize/mult {
		return 0, fmt.Errorf("%s is too large", v)
	}
	b := n * mult
	if b%int64(unit) != 0 {
		return 0, fmt.Errorf("%s is not a whole number of %s", v, unit.plural())
	}
	return b / int64(unit), nil
}

// durationUnits are the units of ParseDuration, in nanoseconds: Go's,
// and days and weeks.
var durationUnits = map[string]float64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9,
	"d": 24 * 3600e9, "w": 7 * 24 * 3600e9,
}

// ParseDuration is the one syntax of durations in configuration keys and
// command-line flags: Go's (300ms, 30s, 5m, 1h30m) with days (d, 24h) and
// weeks (w, 7d) besides, alone or combined (30d, 1d12h, 2w, 1.5d). A day
// is 24 hours exactly: durations here are spans of elapsed time, not
// calendar days.
func ParseDuration(v string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration (like 30s, 5m, 24h, 30d or 1d12h)", v)
	s := strings.TrimSpace(v)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, bad
	}
	isNum := func(c byte) bool { return c >= '0' && c <= '9' || c == '.' }
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && isNum(s[i]) {
			i++
		}
		j := i
		for j < len(s) && !isNum(s[j]) {
			j++
		}
		num, unit := s[:i], s[i:j]
		s = s[j:]
		f, err := strconv.ParseFloat(num, 64)
		mult, ok := durationUnits[unit]
		if err != nil || !ok {
			return 0, bad
		}
		if f*mult >= math.MaxInt64 {
			return 0, fmt.Errorf("%s is too long", v)
		}
		var d time.Duration
		switch unit {
		case "d", "w":
			per := time.Duration(24)
			if unit == "w" {
				per *= 7
			}
			d, err = time.ParseDuration(num + "h")
			if d > math.MaxInt64/per {
				return 0, fmt.Errorf("%s is too long", v)
			}
			d *= per
		default:
			d, err = time.ParseDuration(num + unit)
		}
		if err != nil {
			return 0, bad
		}
		if total > math.MaxInt64-d {
			return 0, fmt.Errorf("%s is too long", v)
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
}

// ParseExpressBuckets parses zone=bucket,zone=bucket.
func ParseExpressBuckets(v string) ([]objstore.ZoneBucket, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []objstore.ZoneBucket
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		z, b, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fieldErr("s3-express-buckets", "%q is not zone=bucket", part)
		}
		if z == "" || b == "" {
			return nil, fieldErr("s3-express-buckets", "%q has an empty zone or bucket", part)
		}
		if seen[z] {
			return nil, fieldErr("s3-express-buckets", "zone %q given twice", z)
		}
		seen[z] = true
		out = append(out, objstore.ZoneBucket{Zone: z, Bucket: b})
	}
	return out, nil
}

// FormatExpressBuckets is the inverse of ParseExpressBuckets.
func FormatExpressBuckets(zb []objstore.ZoneBucket) string {
	parts := make([]string, len(zb))
	for i, x := range zb {
		parts[i] = x.Zone + "=" + x.Bucket
	}
	return strings.Join(parts, ",")
}
