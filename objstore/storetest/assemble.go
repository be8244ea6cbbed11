package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// source is an object the assembly tests read from.
type source struct {
	key  string
	data []byte
}

func putSources(t *testing.T, s objstore.Store, b string, sizes ...int) []source {
	var out []source
	for i, n := range sizes {
		src := source{key: fmt.Sprintf("src/%d", i), data: Bytes(uint64(100+i), n)}
		mustPut(t, s, b, src.key, src.data)
		out = append(out, src)
	}
	return out
}

// spec is a piece in a test case: a range of source src (src >= 0) or
// local bytes.
type spec struct {
	src      int
	off, len int
}

func build(b string, srcs []source, specs []spec, withCRC bool) ([]objstore.Piece, []byte) {
	var pieces []objstore.Piece
	var want []byte
	for i, sp := range specs {
		if sp.src < 0 {
			d := Bytes(uint64(1000+i), sp.len)
			pieces = append(pieces, objstore.DataPiece(d))
			want = append(want, d...)
			continue
		}
		d := srcs[sp.src].data[sp.off : sp.off+sp.len]
		p := objstore.RangePiece(b, srcs[sp.src].key, int64(sp.off), int64(sp.len))
		if withCRC {
			p.CRC32C, p.HasCRC32C = bundlefmt.CRC32C(d), true
		}
		pieces = append(pieces, p)
		want = append(want, d...)
	}
	return pieces, want
}

func testAssembleMixes(t *testing.T, h Harness) {
	s, b := h.Store, h.NewBucket(t)
	srcs := putSources(t, s, b, 24*mib, 20*mib, 3*mib)
	const L = -1
	cases := map[string][]spec{
		"big ranges":       {{0, 0, 8 * mib}, {1, mib, 8 * mib}, {0, 9 * mib, 6 * mib}},
		"small only":       {{0, 10, 4000}, {1, 5000, 70000}, {2, 0, 1000}, {L, 0, 300}},
		"mixed":            {{0, 100, 6 * mib}, {2, 0, 200 * 1024}, {L, 0, 4096}, {1, 3 * mib, 7*mib + 3}, {2, mib, 64 * 1024}, {0, 12 * mib, 5*mib + 1}, {L, 0, 40}},
		"borrow heads":     {{2, 0, 3 * mib}, {0, 0, 6 * mib}, {2, 0, 10}, {1, 0, 6 * mib}, {L, 0, 100}},
		"many small":       {{0, 0, 2 * mib}, {1, 0, 2 * mib}, {0, 2 * mib, 2 * mib}, {2, 0, 2 * mib}, {1, 2 * mib, 2 * mib}, {L, 0, 2 * mib}},
		"contiguous":       {{0, 0, 3 * mib}, {0, 3 * mib, 3 * mib}, {0, 6 * mib, 100}, {L, 0, 7}},
		"one big range":    {{1, 123, 19 * mib}},
		"tiny":             {{L, 0, 1}},
		"empty":            {},
		"local multipart":  {{L, 0, 6 * mib}, {L, 0, 6 * mib}},
		"big tail, no crc": {{2, 0, 100}, {0, 0, 24 * mib}},
	}
	for name, specs := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pieces, want := build(b, srcs, specs, name != "big tail, no crc")
			key := "out/" + name
			req := objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces, Stager: NewMemStager(),
				ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: name != "big tail, no crc"}
			res, err := s.Assemble(ctxT(t), req)
			if err != nil {
				t.Fatalf("assemble: %v", err)
			}
			if got := ReadAll(t, s, b, key); !bytes.Equal(got, want) {
				t.Fatalf("assembled %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
			}
			if res.Size != int64(len(want)) || res.BytesCopied+res.BytesUploaded != int64(len(want)) {
				t.Errorf("result %+v for %d bytes", res, len(want))
			}
			t.Logf("%+v", res)
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func testAssembleOntoExisting(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	srcs := putSources(t, s, b, 12*mib)
	standing := Bytes(7, 1234)
	for _, specs := range [][]spec{
		{{0, 0, 6 * mib}, {-1, 0, 100}, {0, 7 * mib, 5 * mib}}, // multipart
		{{0, 5, 1000}, {-1, 0, 10}},                            // one PutObject
	} {
		key := fmt.Sprintf("taken/%d", len(specs))
		mustPut(t, s, b, key, standing)
		pieces, _ := build(b, srcs, specs, true)
		var created string
		res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces, Stager: NewMemStager(),
			Hooks: objstore.Hooks{UploadCreated: func(id string) error { created = id; return nil }}})
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("assemble onto %s: %v, want ErrExists", key, err)
		}
		if got := ReadAll(t, s, b, key); !bytes.Equal(got, standing) {
			t.Fatalf("assembly onto %s changed the standing object", key)
		}
		if res.UploadID != created {
			t.Errorf("result upload %q, hook saw %q", res.UploadID, created)
		}
		if res.UploadID != "" {
			if err := s.AbortAssembly(ctx, b, key, res.UploadID); err != nil {
				t.Fatalf("abort after 412: %v", err)
			}
			if _, err := s.ListParts(ctx, b, key, res.UploadID); !errors.Is(err, objstore.ErrNoUpload) {
				t.Errorf("list parts after abort: %v, want ErrNoUpload", err)
			}
			if err := s.AbortAssembly(ctx, b, key, res.UploadID); err != nil {
				t.Errorf("second abort: %v", err)
			}
		}
	}
}

// testAssembleRace: assemblies racing for one key publish exactly one
// object, the winner's; the losers get ErrExists and abort.
func testAssembleRace(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	srcs := putSources(t, s, b, 12*mib)
	const racers = 6
	wants := make([][]byte, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		pieces, want := build(b, srcs, []spec{{0, i, 6 * mib}, {-1, 0, 100 + i}, {0, 7 * mib, 5 * mib}}, true)
		wants[i] = want
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res objstore.AssembleResult
			res, errs[i] = s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "race/out", Pieces: pieces,
				ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
			if errors.Is(errs[i], objstore.ErrExists) && res.UploadID != "" {
				if err := s.AbortAssembly(ctx, b, "race/out", res.UploadID); err != nil {
					t.Errorf("racer %d: abort: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("racers %d and %d both published", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, objstore.ErrExists):
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no racer published")
	}
	if got := ReadAll(t, s, b, "race/out"); !bytes.Equal(got, wants[won]) {
		t.Fatal("the standing object is not the winner's")
	}
}

func testSourceChanged(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	srcs := putSources(t, s, b, 8*mib)
	a, err := s.Head(ctx, b, srcs[0].key)
	if err != nil {
		t.Fatal(err)
	}
	for name, specs := range map[string][]spec{"copied": {{0, 0, 6 * mib}, {-1, 0, 10}}, "fetched": {{0, 0, 1000}, {-1, 0, 10}}} {
		pieces, want := build(b, srcs, specs, true)
		pieces[0].SrcETag = a.ETag
		if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "pinned/" + name, Pieces: pieces}); err != nil {
			t.Fatalf("%s: assembly with the right pin: %v", name, err)
		}
		if got := ReadAll(t, s, b, "pinned/"+name); !bytes.Equal(got, want) {
			t.Fatalf("%s: pinned assembly differs", name)
		}
		pieces[0].SrcETag = `"0123456789abcdef0123456789abcdef"`
		res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "stale/" + name, Pieces: pieces})
		if !errors.Is(err, objstore.ErrSourceChanged) {
			t.Fatalf("%s: assembly with a stale pin: %v, want ErrSourceChanged", name, err)
		}
		var se *objstore.SourceError
		if !errors.As(err, &se) || se.Bucket != b || se.Key != srcs[0].key {
			t.Errorf("%s: stale pin: %v is not a SourceError naming %s/%s", name, err, b, srcs[0].key)
		}
		if res.UploadID != "" {
			if err := s.AbortAssembly(ctx, b, "stale/"+name, res.UploadID); err != nil {
				t.Fatal(err)
			}
		}
		// a source that is not there at all: a SourceError naming it (a
		// caller with another copy of it may assemble from there)
		pieces[0].SrcETag, pieces[0].SrcKey = "", "no/such/source"
		res, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "nosource/" + name, Pieces: pieces})
		if !errors.As(err, &se) || se.Key != "no/such/source" || se.Bucket != b {
			t.Errorf("%s: missing source: %v, want a SourceError naming it", name, err)
		}
		if res.UploadID != "" {
			if err := s.AbortAssembly(ctx, b, "nosource/"+name, res.UploadID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func testAssembleChecksum(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	srcs := putSources(t, s, b, 12*mib)
	for name, specs := range map[string][]spec{"multipart": {{0, 0, 6 * mib}, {0, 7 * mib, 100}, {-1, 0, 10}}, "single": {{0, 0, 1000}, {-1, 0, 10}}} {
		pieces, want := build(b, srcs, specs, false)
		key := "badcrc/" + name
		res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces,
			ExpectedCRC32C: bundlefmt.CRC32C(want) ^ 1, HasExpectedCRC32C: true})
		if !errors.Is(err, objstore.ErrChecksum) {
			t.Fatalf("%s: assembly with a wrong expected CRC: %v, want ErrChecksum", name, err)
		}
		// A wrong assembly is never visible, unless the store found it
		// wrong only after publishing it (a read-back): then it says so
		// with ErrPublishedBad and never deletes it itself (only the
		// caller's reap deletes: fenced, behind the catalog re-check).
		_, herr := s.Head(ctx, b, key)
		switch {
		case errors.Is(err, objstore.ErrPublishedBad):
			if herr != nil {
				t.Fatalf("%s: a published-bad assembly is gone (the store deleted it itself?): %v", name, herr)
			}
			if derr := s.Delete(ctx, b, []string{key}); derr != nil {
				t.Fatal(derr)
			}
		case !errors.Is(herr, objstore.ErrNotFound):
			t.Fatalf("%s: a wrong assembly is visible: %v", name, herr)
		}
		if res.UploadID != "" {
			if err := s.AbortAssembly(ctx, b, key, res.UploadID); err != nil {
				t.Fatal(err)
			}
		}
		// a source piece whose bytes do not match its CRC
		pieces[0].CRC32C, pieces[0].HasCRC32C = 12345, true
		if name == "single" {
			if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces}); err == nil {
				// the file backend copies without reading; only S3's
				// fetched pieces are checked one by one
				t.Logf("%s: piece CRC not checked by this backend", name)
			} else if !errors.Is(err, objstore.ErrChecksum) {
				t.Fatalf("%s: bad piece CRC: %v, want ErrChecksum", name, err)
			}
		}
	}
	// A small object laid out whole by the caller, one local piece with
	// its CRC (settle's single PUT): a piece CRC or an expected CRC that
	// disagrees with the bytes publishes nothing; the right ones publish
	// exactly those bytes.
	obj := bytes.Repeat([]byte("laid out whole "), 4096)
	crc := bundlefmt.CRC32C(obj)
	for _, c := range []struct {
		name          string
		piece, expect uint32
	}{{"piece", crc ^ 1, crc}, {"expected", crc, crc ^ 1}} {
		key := "badcrc/whole-" + c.name
		_, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key,
			Pieces:         []objstore.Piece{{Data: obj, CRC32C: c.piece, HasCRC32C: true}},
			ExpectedCRC32C: c.expect, HasExpectedCRC32C: true})
		if !errors.Is(err, objstore.ErrChecksum) {
			t.Fatalf("whole, wrong %s CRC: %v, want ErrChecksum", c.name, err)
		}
		if _, herr := s.Head(ctx, b, key); !errors.Is(herr, objstore.ErrNotFound) {
			t.Fatalf("whole, wrong %s CRC: the key holds an object (%v)", c.name, herr)
		}
	}
	if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "badcrc/whole",
		Pieces:         []objstore.Piece{{Data: obj, CRC32C: crc, HasCRC32C: true}},
		ExpectedCRC32C: crc, HasExpectedCRC32C: true}); err != nil {
		t.Fatalf("whole: %v", err)
	}
	if got, _, err := s.GetRange(ctx, b, "badcrc/whole", 0, int64(len(obj))); err != nil || !bytes.Equal(got, obj) {
		t.Fatalf("whole: read back %d bytes (%v), want the %d laid out", len(got), err, len(obj))
	}
}

// testAssembleSource: a store asks the request's Source for the whole
// source pieces it fetches (never for one it copies) and uses the bytes
// it is handed instead of fetching them; bytes that are not the piece's
// fail the assembly with ErrChecksum and publish nothing. A store that
// copies every piece (the file store) never asks.
func testAssembleSource(t *testing.T, h Harness) {
	s, b := h.Store, h.NewBucket(t)
	srcs := putSources(t, s, b, 7*mib, mib)
	pieces, want := build(b, srcs, []spec{{1, 10, 4000}, {0, 5000, 70000}, {-1, 0, 300}, {0, 0, 6 * mib}}, true)
	var mu sync.Mutex
	asked := 0
	serve := func(bad bool) func(ctx context.Context, p objstore.Piece) ([]byte, error) {
		return func(ctx context.Context, p objstore.Piece) ([]byte, error) {
			mu.Lock()
			asked++
			mu.Unlock()
			for _, src := range srcs {
				if src.key == p.SrcKey {
					d := bytes.Clone(src.data[p.Off : p.Off+p.Len])
					if bad {
						d[0] ^= 1
					}
					return d, nil
				}
			}
			return nil, nil
		}
	}
	ctx, tally := objstore.Count(ctxT(t))
	res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out/served", Pieces: pieces, Source: serve(false),
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	if got := ReadAll(t, s, b, "out/served"); !bytes.Equal(got, want) {
		t.Fatalf("assembled %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	if got := tally.Totals(); got.Fetched != 0 || got.Copied+got.Uploaded != int64(len(want)) {
		t.Errorf("with every fetched piece served: observed %+v (asked %d times), result %+v", got, asked, res)
	}
	asked = 0
	_, err = s.Assemble(ctxT(t), objstore.AssembleRequest{Bucket: b, Key: "out/bad", Pieces: pieces, Source: serve(true),
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
	switch {
	case asked > 0 && !errors.Is(err, objstore.ErrChecksum):
		t.Errorf("assembly from wrong bytes: %v, want ErrChecksum", err)
	case asked > 0:
		if _, herr := s.Head(ctxT(t), b, "out/bad"); !errors.Is(herr, objstore.ErrNotFound) {
			t.Errorf("assembly from wrong bytes published: head %v", herr)
		}
	case err != nil:
		t.Errorf("assembly that asked nothing: %v", err)
	}
}
