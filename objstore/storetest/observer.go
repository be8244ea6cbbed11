package storetest

import (
	"context"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// testObserver: the backend tells the context's observer of every request
// it sends and of the bytes it moves, by path, where they move: each call
// is at least one request, a PUT's bytes are uploaded, a GET's fetched,
// and an assembly's bytes are the ones its result reports (read-back
// apart from fetched), whether it copied, fetched or uploaded them.
func testObserver(t *testing.T, h Harness) {
	s, b := h.Store, h.NewBucket(t)
	call := func(name string, f func(ctx context.Context) error) objstore.Totals {
		t.Helper()
		ctx, tally := objstore.Count(ctxT(t))
		if err := f(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := tally.Totals()
		if got.Requests < 1 {
			t.Errorf("%s: the observer was told of %d requests", name, got.Requests)
		}
		return got
	}
	data := Bytes(7, 300000)
	if got := call("PutIfAbsent", func(ctx context.Context) error { return s.PutIfAbsent(ctx, b, "src/a", data) }); got != (objstore.Totals{Requests: got.Requests, Retries: got.Retries, Uploaded: int64(len(data))}) {
		t.Errorf("PutIfAbsent of %d bytes: observed %+v", len(data), got)
	}
	if got := call("GetRange", func(ctx context.Context) error { _, _, err := s.GetRange(ctx, b, "src/a", 1000, 5000); return err }); got.Fetched != 5000 || got.Uploaded+got.Copied+got.ReadBack != 0 {
		t.Errorf("GetRange of 5000 bytes: observed %+v", got)
	}
	if got := call("GetSuffix", func(ctx context.Context) error { _, _, err := s.GetSuffix(ctx, b, "src/a", 700); return err }); got.Fetched != 700 {
		t.Errorf("GetSuffix of 700 bytes: observed %+v", got)
	}
	if got := call("Head", func(ctx context.Context) error { _, err := s.Head(ctx, b, "src/a"); return err }); got.Fetched+got.Uploaded+got.Copied+got.ReadBack != 0 {
		t.Errorf("Head: observed bytes %+v", got)
	}
	srcs := putSources(t, s, b, 7*mib, mib)
	for name, specs := range map[string][]spec{
		"small":     {{1, 10, 4000}, {0, 5000, 70000}, {-1, 0, 300}},
		"multipart": {{0, 0, 6 * mib}, {1, 0, 200000}, {-1, 0, 4096}},
	} {
		pieces, want := build(b, srcs, specs, true)
		var res objstore.AssembleResult
		got := call("Assemble "+name, func(ctx context.Context) (err error) {
			res, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out/" + name, Pieces: pieces,
				ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
			return err
		})
		if got.Copied != res.BytesCopied || got.Fetched+got.ReadBack != res.BytesFetched || got.ReadBack != res.BytesReadBack ||
			got.Uploaded != res.BytesUploaded || got.Copied+got.Uploaded != int64(len(want)) {
			t.Errorf("Assemble %s of %d bytes: observed %+v, the result says %+v", name, len(want), got, res)
		}
	}
}
