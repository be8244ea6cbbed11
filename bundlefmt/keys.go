package bundlefmt

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Keys (docs/format.md#keys) are built and parsed here without the store's
// prefix: objstore prepends its configured prefix.

// ValidStar reports whether s fully matches [a-z0-9][a-z0-9-]{0,62}.
func ValidStar(s string) bool { return validName(s, "-") }

// ValidBucket reports whether s fully matches [a-z0-9][a-z0-9._-]{0,62}.
func ValidBucket(s string) bool { return validName(s, "._-") }

func validName(s, extra string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			continue
		}
		if i == 0 || strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// SlotKey is the key of a chain slot: stars/<star>/chain/<epoch:20>/<seq:20>.
// It only formats: star must satisfy ValidStar, epoch be in [1, 2^63-1] and
// seq in [0, 2^63-1] for the key to parse back.
func SlotKey(star string, epoch, seq uint64) string {
	return fmt.Sprintf("stars/%s/chain/%020d/%020d", star, epoch, seq)
}

// MarkKey is the key of a star's n-th marker object, and MarkConfirmKey
// that of its confirmation: stars/<star>/auditor/marks/<n:20> and the same
// with ".ok" (docs/format.md#marker-objects). Auditor-owned: only the
// auditor writes and reads them, in the standard bucket.
func MarkKey(star string, n uint64) string { return MarkPrefix(star) + fmt.Sprintf("%020d", n) }

// MarkConfirmKey is the key that confirms marker n of star (see MarkKey).
func MarkConfirmKey(star string, n uint64) string { return MarkKey(star, n) + markConfirmSuffix }

const markConfirmSuffix = ".ok"

// MarkPrefix is the prefix of every marker key of star.
func MarkPrefix(star string) string { return "stars/" + star + "/auditor/marks/" }

// ParseMarkKey parses a marker or confirmation key of star (no store
// prefix): its number and whether it is a confirmation.
func ParseMarkKey(star, key string) (n uint64, confirm bool, err error) {
	rest, ok := strings.CutPrefix(key, MarkPrefix(star))
	if !ok {
		return 0, false, fmt.Errorf("marker key %q: not under %s", key, MarkPrefix(star))
	}
	rest, confirm = strings.CutSuffix(rest, markConfirmSuffix)
	n, ok = parsePadded(rest)
	if !ok || n == 0 {
		return 0, false, fmt.Errorf("marker key %q: number %q is not 20 digits in [1, 2^63-1]", key, rest)
	}
	return n, confirm, nil
}

// SettledKey is the key of a settled object:
// buckets/<bucket>/streams/<stream-hex>/<stream-epoch:20>/<first-record:20>~<revision>.
// It only formats; see ParseSettledKey for the ranges that parse back.
func SettledKey(bucket string, stream StreamID, streamEpoch, firstRecord uint64, revision uint32) string {
	// 32 hex digits, not the uuid form of StreamID.String: the key layout
	return fmt.Sprintf("buckets/%s/streams/%x/%020d/%020d~%d", bucket, stream[:], streamEpoch, firstRecord, revision)
}

// SettledKeyParts are the coordinates of a settled key.
type SettledKeyParts struct {
	Bucket      string
	Stream      StreamID
	StreamEpoch uint64
	FirstRecord uint64
	Revision    uint32
}

// Key returns the canonical key of p.
func (p SettledKeyParts) Key() string {
	return SettledKey(p.Bucket, p.Stream, p.StreamEpoch, p.FirstRecord, p.Revision)
}

// parsePadded parses exactly 20 ASCII digits as a number ≤ 2^63-1.
func parsePadded(s string) (uint64, bool) {
	if len(s) != 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < 20; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (MaxNumber-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// ParseSlotKey parses a canonical slot key (no prefix). The epoch must be
// ≥ 1 (an envelope's epoch is) and both numbers ≤ 2^63-1.
func ParseSlotKey(key string) (star string, epoch, seq uint64, err error) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[0] != "stars" || parts[2] != "chain" {
		return "", 0, 0, fmt.Errorf("slot key %q: want stars/<star>/chain/<epoch:20>/<seq:20>", key)
	}
	if !ValidStar(parts[1]) {
		return "", 0, 0, fmt.Errorf("slot key %q: invalid star name %q", key, parts[1])
	}
	epoch, ok := parsePadded(parts[3])
	if !ok || epoch == 0 {
		return "", 0, 0, fmt.Errorf("slot key %q: epoch %q is not 20 digits in [1, 2^63-1]", key, parts[3])
	}
	seq, ok = parsePadded(parts[4])
	if !ok {
		return "", 0, 0, fmt.Errorf("slot key %q: seq %q is not 20 digits in [0, 2^63-1]", key, parts[4])
	}
	return parts[1], epoch, seq, nil
}

// ParseSettledKey parses a canonical settled key (no prefix): lowercase hex
// stream ID, 20-digit stream epoch and first record ≤ 2^63-1, and a revision
// in plain decimal without leading zeros, ≤ 2^31-1.
func ParseSettledKey(key string) (SettledKeyParts, error) {
	var p SettledKeyParts
	parts := strings.Split(key, "/")
	if len(parts) != 6 || parts[0] != "buckets" || parts[2] != "streams" {
		return p, fmt.Errorf("settled key %q: want buckets/<bucket>/streams/<stream>/<epoch:20>/<first:20>~<revision>", key)
	}
	if !ValidBucket(parts[1]) {
		return p, fmt.Errorf("settled key %q: invalid bucket name %q", key, parts[1])
	}
	p.Bucket = parts[1]
	if !isLowerHex(parts[3], 32) {
		return p, fmt.Errorf("settled key %q: stream %q is not 32 lowercase hex digits", key, parts[3])
	}
	if _, err := hex.Decode(p.Stream[:], []byte(parts[3])); err != nil {
		return p, fmt.Errorf("settled key %q: %w", key, err)
	}
	var ok bool
	if p.StreamEpoch, ok = parsePadded(parts[4]); !ok {
		return p, fmt.Errorf("settled key %q: stream epoch %q is not 20 digits in [0, 2^63-1]", key, parts[4])
	}
	first, rev, found := strings.Cut(parts[5], "~")
	if !found {
		return p, fmt.Errorf("settled key %q: missing ~<revision>", key)
	}
	if p.FirstRecord, ok = parsePadded(first); !ok {
		return p, fmt.Errorf("settled key %q: first record %q is not 20 digits in [0, 2^63-1]", key, first)
	}
	if rev == "" || len(rev) > 10 || rev[0] == '0' && len(rev) > 1 || strings.TrimLeft(rev, "0123456789") != "" {
		return p, fmt.Errorf("settled key %q: revision %q is not canonical decimal", key, rev)
	}
	r, err := strconv.ParseUint(rev, 10, 32)
	if err != nil || r > MaxRevision {
		return p, fmt.Errorf("settled key %q: revision %q exceeds 2^31-1", key, rev)
	}
	p.Revision = uint32(r)
	return p, nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ExpectFromKey derives what an object's key says about it: a slot key gives
// the kind (slot: flight or poison) and epoch/seq, a settled key the stream
// and first record. The key may carry a store prefix (anything ending in "/"
// before the canonical part); Expect.Key keeps the key as given.
func ExpectFromKey(key string) (Expect, error) {
	exp := Expect{Key: key, CheckKey: true}
	segs := strings.Split(key, "/")
	n := len(segs)
	// A bucket may be named "stars", so try both shapes.
	if n >= 6 && segs[n-6] == "buckets" {
		if p, err := ParseSettledKey(strings.Join(segs[n-6:], "/")); err == nil {
			exp.Kind, exp.Stream, exp.FirstRecord = KindSettled, p.Stream, p.FirstRecord
			return exp, nil
		}
	}
	if n >= 5 && segs[n-5] == "stars" {
		if _, epoch, seq, err := ParseSlotKey(strings.Join(segs[n-5:], "/")); err == nil {
			exp.Kind, exp.Epoch, exp.Seq = KindSlot, epoch, seq
			return exp, nil
		}
	}
	return Expect{}, fmt.Errorf("key %q is neither a canonical slot key nor a canonical settled key", key)
}
