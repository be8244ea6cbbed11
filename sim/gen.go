package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/nova/auditor/bundlefmt"
)

// Content is a star's content profile: with a stream ID and a record number
// it determines a record completely (headers, body, timestamp, sizes), so
// nothing written needs storing and novasim check regenerates every byte. It
// is fixed when the star is set up and recorded in nova.sim_stars.
type Content struct {
	Seed        uint64
	MinBytes    int     // content bytes of a record (body + header names and values), at least
	MaxBytes    int     // and at most
	HeaderShare float64 // share of records that carry headers
	EmptyShare  float64 // share of records whose body is empty
}

// DefaultContent is the profile novasim setup uses unless told otherwise.
func DefaultContent(seed uint64) Content {
	return Content{Seed: seed, MinBytes: 16, MaxBytes: 16 << 10, HeaderShare: 0.3, EmptyShare: 0.02}
}

// Validate checks the profile.
func (c Content) Validate() error {
	switch {
	case c.MinBytes < 0 || c.MaxBytes < c.MinBytes:
		return fmt.Errorf("record-bytes: min %d, max %d: want 0 <= min <= max", c.MinBytes, c.MaxBytes)
	case c.MaxBytes > 64<<20:
		return fmt.Errorf("record-bytes: max %d exceeds 64 MiB", c.MaxBytes)
	case !(c.HeaderShare >= 0 && c.HeaderShare <= 1):
		return fmt.Errorf("headers: share %v outside [0, 1]", c.HeaderShare)
	case !(c.EmptyShare >= 0 && c.EmptyShare <= 1):
		return fmt.Errorf("empty-share: %v outside [0, 1]", c.EmptyShare)
	}
	return nil
}

// BaseTimestamp is the Unix-millisecond origin of generated timestamps.
const BaseTimestamp = 1_700_000_000_000

// mix64 is the splitmix64 finaliser: a bijective, well-mixed 64-bit hash.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// streamKey hashes (seed, stream) into one word.
func streamKey(seed uint64, s bundlefmt.StreamID) uint64 {
	h := mix64(seed ^ 0x6e6f76612d73696d) // "nova-sim"
	h = mix64(h ^ binary.LittleEndian.Uint64(s[0:8]))
	return mix64(h ^ binary.LittleEndian.Uint64(s[8:16]))
}

// rng is wyrand: tiny, fast, good enough for content.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// float returns a uniform value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// intn returns a uniform value in [0, n) for n > 0.
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// fill fills b with pseudo-random bytes.
func (r *rng) fill(b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.next())
		b = b[8:]
	}
	if len(b) > 0 {
		v := r.next()
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
	}
}

// logUniform returns a size in [lo, hi], uniform in log scale (most sizes small).
func logUniform(u float64, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	l, h := math.Log(float64(lo)+1), math.Log(float64(hi)+1)
	v := int(math.Exp(l+u*(h-l))) - 1
	return min(max(v, lo), hi)
}

// StreamProfile is what a stream's records have in common: a typical size
// (skewed: most streams small, a few large) and a timestamp origin and step.
type StreamProfile struct {
	key     uint64
	typical int
	tsBase  int64
	tsStep  int64
}

// Stream returns the profile of one stream.
func (c Content) Stream(s bundlefmt.StreamID) StreamProfile {
	k := streamKey(c.Seed, s)
	r := rng{s: k}
	p := StreamProfile{key: k}
	p.typical = logUniform(r.float(), c.MinBytes, c.MaxBytes)
	p.tsBase = BaseTimestamp + int64(r.intn(86_400_000))
	p.tsStep = 1 + int64(r.intn(200))
	return p
}

// headerNames are the names generated headers draw from (plus random ones).
var headerNames = [...]string{"content-type", "trace-id", "tenant", "key", "x-producer", "schema", ""}

// Gen generates records; it reuses its buffers, so the Record it returns is
// valid until the next call. A Gen is not safe for concurrent use.
type Gen struct {
	c    Content
	buf  []byte
	hdrs []bundlefmt.Header
}

// NewGen returns a generator for the profile.
func NewGen(c Content) *Gen { return &Gen{c: c} }

// Content returns the generator's profile.
func (g *Gen) Content() Content { return g.c }

// Record returns record n of the stream whose profile is p, and its
// timestamp: a pure function of (seed, stream, n).
func (g *Gen) Record(p StreamProfile, n int64) (bundlefmt.Record, int64) {
	c := g.c
	r := rng{s: mix64(p.key ^ mix64(uint64(n)+0x9e3779b97f4a7c15))}
	ts := p.tsBase + n*p.tsStep + int64(r.intn(1001)) - 500

	// Size: near the stream's typical size (within an octave either way) nine
	// times in ten, anywhere in [min, max] (log-uniform) otherwise.
	var size int
	if r.intn(10) < 9 {
		size = int(float64(p.typical) * math.Exp2(r.float()+r.float()-1))
		size = min(max(size, c.MinBytes), c.MaxBytes)
	} else {
		size = logUniform(r.float(), c.MinBytes, c.MaxBytes)
	}
	empty := r.float() < c.EmptyShare
	withHeaders := r.float() < c.HeaderShare

	g.hdrs = g.hdrs[:0]
	need := size
	if !withHeaders && empty {
		need = 0
	}
	if cap(g.buf) < need {
		g.buf = make([]byte, need)
	}
	buf := g.buf[:need]
	r.fill(buf)
	if !withHeaders {
		if empty {
			return bundlefmt.Record{}, ts
		}
		return bundlefmt.Record{Body: buf}, ts
	}

	// Headers take a share of the size: 1-4 headers (rarely up to 300, to
	// exercise the wider header tables), each a name and a value.
	count := 1 + r.intn(4)
	if r.intn(200) == 0 {
		count = 1 + r.intn(300)
	}
	budget := size
	if !empty {
		budget = size / 2
	}
	pos := 0
	for i := 0; i < count; i++ {
		// Names and values are cut from buf, so the record's content bytes
		// never exceed its size; a well-known name overwrites its share.
		nl := r.intn(12)
		j := r.intn(len(headerNames) + 1)
		if j < len(headerNames) {
			nl = len(headerNames[j])
		}
		nl = max(min(nl, budget-pos), 0)
		name := buf[pos : pos+nl]
		if j < len(headerNames) {
			copy(name, headerNames[j])
		}
		pos += nl
		vl := r.intn(33)
		if r.intn(50) == 0 {
			vl = 256 + r.intn(1024) // a u16 header table
		}
		if r.intn(2000) == 0 {
			vl = 65536 + r.intn(1024) // a u32 header table
		}
		end := min(pos+vl, budget)
		if pos > end {
			end = pos
		}
		g.hdrs = append(g.hdrs, bundlefmt.Header{Name: name, Value: buf[pos:end]})
		pos = end
	}
	rec := bundlefmt.Record{Headers: g.hdrs}
	if !empty {
		rec.Body = buf[pos:]
	}
	return rec, ts
}

// Append appends the stored form of record n to dst (what a chunk holds)
// and returns the record's timestamp.
func (g *Gen) Append(dst []byte, p StreamProfile, n int64) ([]byte, int64, error) {
	rec, ts := g.Record(p, n)
	out, err := bundlefmt.AppendRecord(dst, rec)
	return out, ts, err
}
