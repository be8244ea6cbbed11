package s3store

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// goroutineRecorder notes the goroutine that sends each GET.
type goroutineRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	gets []string
}

// goroutineID is the calling goroutine's number, from its stack header
// ("goroutine 17 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

func (g *goroutineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		g.mu.Lock()
		g.gets = append(g.gets, goroutineID())
		g.mu.Unlock()
	}
	return g.next.RoundTrip(r)
}

// TestGatherOneFetchInline: a small object gathered from one source range
// (a small stream's chunk of one slot, the common settle) is fetched on
// the caller's goroutine, with no goroutine of its own to grow a stack
// through the SDK for every object; two ranges are still fetched at once,
// each on its own goroutine. Both assemblies hold the right bytes.
func TestGatherOneFetchInline(t *testing.T) {
	rec := &goroutineRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	s := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: rec}})
	b := newBucket(t, s, "gather")
	ctx := context.Background()
	src := storetest.Bytes(3, 64<<10)
	if err := s.PutIfAbsent(ctx, b, "slot", src); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		pieces []objstore.Piece
		want   []byte
	}{
		{"one-range", []objstore.Piece{objstore.RangePiece(b, "slot", 100, 1000), objstore.DataPiece([]byte("footer"))},
			append(append([]byte{}, src[100:1100]...), "footer"...)},
		{"two-ranges", []objstore.Piece{objstore.RangePiece(b, "slot", 100, 1000), objstore.RangePiece(b, "slot", 5000, 2000), objstore.DataPiece([]byte("footer"))},
			append(append(append([]byte{}, src[100:1100]...), src[5000:7000]...), "footer"...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.gets = nil
			rec.mu.Unlock()
			caller := goroutineID()
			if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out-" + c.name, Pieces: c.pieces}); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			gets := append([]string{}, rec.gets...)
			rec.mu.Unlock()
			if got := storetest.ReadAll(t, s, b, "out-"+c.name); !bytes.Equal(got, c.want) {
				t.Fatal("assembly differs")
			}
			// the assembly's own GETs come first (the read-back, if any, after)
			fetches := len(c.pieces) - 1
			if len(gets) < fetches {
				t.Fatalf("%d GETs, want at least %d", len(gets), fetches)
			}
			for i, g := range gets[:fetches] {
				if inline := g == caller; inline != (fetches == 1) {
					t.Errorf("GET %d of %d on goroutine %s, the caller's %s", i+1, fetches, g, caller)
				}
			}
		})
	}
}
