package sim

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/nova/auditor/bundlefmt"
)

// Traffic is the skewed producer model of one star: streams are ranked by a
// pure function of (seed, stream), and rank r produces batches at a rate
// proportional to 1/(r+1)^ZipfS, so a few hot streams carry most records and
// a long tail of cold ones trickles. Hot streams also send larger batches.
// Traffic decides only who sends when; what is sent comes from Gen.
type Traffic struct {
	streams []bundlefmt.StreamID // by rank, hottest first
	cum     []float64            // cumulative weights by rank
	batch   []int                // mean batch size by rank
	rnd     *rand.Rand
}

// ZipfS is the skew exponent of stream rates.
const ZipfS = 1.1

// NewTraffic ranks the streams and seeds the traffic's own random source
// (traffic need not be reproducible, but a fixed source makes runs repeatable).
func NewTraffic(seed, session uint64, streams []bundlefmt.StreamID, maxBatch int) *Traffic {
	ranked := append([]bundlefmt.StreamID(nil), streams...)
	sort.Slice(ranked, func(i, j int) bool {
		ki, kj := streamKey(seed^0x72616e6b, ranked[i]), streamKey(seed^0x72616e6b, ranked[j])
		if ki != kj {
			return ki < kj
		}
		return ranked[i].Compare(ranked[j]) < 0
	})
	t := &Traffic{
		streams: ranked,
		cum:     make([]float64, len(ranked)),
		batch:   make([]int, len(ranked)),
		rnd:     rand.New(rand.NewPCG(seed, mix64(session+1))),
	}
	total := 0.0
	for r := range ranked {
		total += 1 / math.Pow(float64(r+1), ZipfS)
		t.cum[r] = total
		// The hottest stream batches up to maxBatch records; the tail sends
		// one or two at a time.
		t.batch[r] = max(1, int(float64(maxBatch)/math.Sqrt(float64(r+1))))
	}
	return t
}

// Next returns the stream that sends the next producer batch and the batch's
// record count (at least 1).
func (t *Traffic) Next() (bundlefmt.StreamID, int) {
	if len(t.streams) == 0 {
		return bundlefmt.StreamID{}, 0
	}
	u := t.rnd.Float64() * t.cum[len(t.cum)-1]
	r := sort.SearchFloat64s(t.cum, u)
	if r >= len(t.streams) {
		r = len(t.streams) - 1
	}
	return t.streams[r], 1 + t.rnd.IntN(2*t.batch[r])
}

// Float returns a uniform value in [0, 1) from the traffic's source (fault
// draws use it, so a run's faults are repeatable too).
func (t *Traffic) Float() float64 { return t.rnd.Float64() }

// sortIDs sorts stream IDs in unsigned byte order.
func sortIDs(ids []bundlefmt.StreamID) {
	sort.Slice(ids, func(i, j int) bool { return ids[i].Compare(ids[j]) < 0 })
}
