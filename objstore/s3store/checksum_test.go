package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// probeWant is what the checksum probe finds on one test server: the mode
// it configures, and whether a ranged copy reports the right CRC-32C for a
// source stored with each algorithm.
type probeWant struct {
	mode   objstore.ChecksumMode
	copies map[objstore.ChecksumAlgorithm]bool
}

// probeWants: versitygw 1.8.0 checks full-object CRC-32C, and a ranged
// copy reports the right CRC-32C unless the source was stored with
// CRC-32C (it reports the whole source's stored CRC): by source.
// SeaweedFS computes a copied part's CRC-32C from the bytes it copies,
// whatever the source is stored with, and combines the parts' CRCs at
// completion: full object.
var probeWants = map[string]probeWant{
	testenv.ServerVersitygw: {objstore.ChecksumBySource, map[objstore.ChecksumAlgorithm]bool{
		objstore.AlgorithmCRC32C: false, objstore.AlgorithmCRC32: true, objstore.AlgorithmSHA256: true, objstore.AlgorithmCRC64NVME: true}},
	testenv.ServerSeaweedFS: {objstore.ChecksumFullObject, map[objstore.ChecksumAlgorithm]bool{
		"": true, objstore.AlgorithmCRC32C: true, objstore.AlgorithmCRC32: true, objstore.AlgorithmSHA1: true,
		objstore.AlgorithmSHA256: true, objstore.AlgorithmCRC64NVME: true}},
}

// testProbeWant is the probe's expected answer on the test server; a server
// the table does not know fails the test (say what it does first).
func testProbeWant(t *testing.T) (probeWant, string) {
	t.Helper()
	server := testenv.S3(t).Server
	want, ok := probeWants[server]
	if !ok {
		t.Fatalf("no expected probe answer for the S3 server %q: add it to probeWants", server)
	}
	return want, server
}

// TestProbe records what the test server supports (probeWants): the probe
// configures the store as the server allows, and leaves nothing behind.
func TestProbe(t *testing.T) {
	want, server := testProbeWant(t)
	s := newStore(t, objstore.S3Config{})
	b := newBucket(t, s, "probe")
	p, err := s.ProbeChecksum(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: %+v", p)
	if !p.FullObject {
		t.Fatalf("%s checks full-object CRC-32C; the probe found no support", server)
	}
	for alg, w := range want.copies {
		if got, ok := p.Copies[alg]; !ok || got != w {
			t.Errorf("copies from sources stored with %q: probed %v (probed at all: %v), %s gives %v", alg, got, ok, server, w)
		}
	}
	ns, err := s.WithProbe(p)
	if err != nil {
		t.Fatal(err)
	}
	c := ns.Config()
	if c.Checksum != want.mode {
		t.Errorf("configured %s on %s, want %s", c.Checksum, server, want.mode)
	}
	if want.mode == objstore.ChecksumBySource && (!c.VerifyReadback || slices.Contains(c.ServerChecked, objstore.AlgorithmCRC32C)) {
		t.Errorf("by source with read-back %v, server checked %v; want read-back, CRC32C not server checked", c.VerifyReadback, c.ServerChecked)
	}
	var keys []string
	if err := s.List(context.Background(), b, "", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("probe left %v", keys)
	}
	var raw int
	out, err := s.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &b})
	if err == nil {
		raw = len(out.Contents)
	}
	if err != nil || raw != 0 {
		t.Errorf("probe left %d objects (%v)", raw, err)
	}
}

// bySourceStore is a store configured as the probe of the test server
// configures it, and a second store on the same server that stores
// objects with put; and the probe's answer.
func bySourceStore(t *testing.T, put objstore.ChecksumAlgorithm) (*Store, *Store, string, objstore.ChecksumProbe) {
	t.Helper()
	plain := newStore(t, objstore.S3Config{})
	b := newBucket(t, plain, "bysrc")
	p, err := plain.ProbeChecksum(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plain.WithProbe(p)
	if err != nil {
		t.Fatal(err)
	}
	// Read-backs in several windows of a size no part boundary lines up
	// with: their CRCs combine to the whole object's, and a damaged byte
	// in any of them is caught.
	s.readBackWin = 3 << 20
	return s, newStore(t, objstore.S3Config{PutChecksum: put}), b, p
}

// TestBySource: on the store as the probe configures it, an assembly is
// checked by the server with no read-back exactly when every source it
// copies from is stored with an algorithm whose ranged copies the probe
// found right (on versitygw 1.8.0, by source: CRC-32, SHA-256 or no
// checksum; a source stored with CRC-32C, alone or beside others, falls
// back to read-back; on SeaweedFS every source). Every object is right.
func TestBySource(t *testing.T) {
	ctx := context.Background()
	s, _, b, probe := bySourceStore(t, "")
	src := storetest.Bytes(8, 16<<20)
	for _, alg := range objstore.PutAlgorithms {
		w := newStore(t, objstore.S3Config{PutChecksum: alg})
		if err := w.PutIfAbsent(ctx, b, "src-"+string(alg), src); err != nil {
			t.Fatal(alg, err)
		}
	}
	for _, c := range []struct {
		name    string
		sources []objstore.ChecksumAlgorithm
	}{
		{"crc32", []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32}},
		{"none", []objstore.ChecksumAlgorithm{objstore.AlgorithmNone}},
		{"sha256", []objstore.ChecksumAlgorithm{objstore.AlgorithmSHA256}},
		{"crc32c", []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32C}},
		{"crc32-and-crc32c", []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32, objstore.AlgorithmCRC32C}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pieces []objstore.Piece
			var want []byte
			checked := true // every source's ranged copies report right
			for _, alg := range c.sources {
				k := "src-" + string(alg)
				a, err := s.Head(ctx, b, k)
				if err != nil {
					t.Fatal(err)
				}
				stored, err := s.storedAlgorithm(ctx, b, k, "")
				if err != nil {
					t.Fatal(err)
				}
				checked = checked && probe.Copies[stored]
				p := objstore.RangePiece(b, k, 1<<20, 6<<20) // a ranged copy
				p.SrcETag = a.ETag
				pieces = append(pieces, p)
				want = append(want, src[1<<20:7<<20]...)
			}
			// a gathered range and the footer
			pieces = append(pieces, objstore.RangePiece(b, "src-"+string(c.sources[0]), 9<<20, 1000), objstore.DataPiece([]byte("footer")))
			want = append(append(want, src[9<<20:9<<20+1000]...), "footer"...)
			key := "out-" + c.name
			res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces,
				ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if got := storetest.ReadAll(t, s, b, key); !bytes.Equal(got, want) {
				t.Fatal("assembly differs")
			}
			if !res.Verified || res.BytesCopied != int64(len(c.sources))*6<<20 {
				t.Errorf("not verified, or not every range copied: %+v", res)
			}
			if checked && res.BytesReadBack != 0 {
				t.Errorf("server-checkable sources, read back %d bytes", res.BytesReadBack)
			}
			if !checked && res.BytesReadBack != res.Size {
				t.Errorf("a source whose ranged copies misreport: read back %d of %d bytes", res.BytesReadBack, res.Size)
			}
		})
	}
}

// TestBySourceCatchesCorruption damages a source at rest on versitygw's
// disk (its stored checksum and ETag unchanged) and assembles a ranged
// copy of it. A source stored with CRC-32 is copied under the server's
// full-object check, which refuses the assembly: nothing is published. A
// source stored with CRC-32C is copied with per-part checksums and read
// back, which finds the damage (ErrPublishedBad: the caller condemns it).
func TestBySourceCatchesCorruption(t *testing.T) {
	testenv.RequireVersitygw(t, "the test damages objects on versitygw's posix backend, and expects its by-source mode")
	ctx := context.Background()
	s, _, b, _ := bySourceStore(t, "")
	src := storetest.Bytes(9, 12<<20)
	for _, c := range []struct {
		alg       objstore.ChecksumAlgorithm
		published bool
	}{{objstore.AlgorithmCRC32, false}, {objstore.AlgorithmCRC32C, true}} {
		t.Run(string(c.alg), func(t *testing.T) {
			k := "src-" + string(c.alg)
			if err := newStore(t, objstore.S3Config{PutChecksum: c.alg}).PutIfAbsent(ctx, b, k, src); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(testenv.VersitygwObjectPath(t, b, k), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			bad := []byte{src[3<<20] ^ 0x40}
			if _, err := f.WriteAt(bad, 3<<20); err != nil {
				t.Fatal(err)
			}
			f.Close()
			want := src[1<<20 : 8<<20]
			key := "out-" + string(c.alg)
			res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: key,
				Pieces:         []objstore.Piece{objstore.RangePiece(b, k, 1<<20, 7<<20), objstore.DataPiece([]byte("f"))},
				ExpectedCRC32C: bundlefmt.CRC32C(append(bytes.Clone(want), 'f')), HasExpectedCRC32C: true})
			t.Logf("%+v: %v", res, err)
			if !errors.Is(err, objstore.ErrChecksum) {
				t.Fatalf("a damaged copy: %v, want ErrChecksum", err)
			}
			if res.Verified {
				t.Error("a damaged assembly reported as checked")
			}
			_, herr := s.Head(ctx, b, key)
			if published := herr == nil; published != c.published || errors.Is(err, objstore.ErrPublishedBad) != c.published {
				t.Errorf("published %v (%v), ErrPublishedBad %v; want %v", published, herr, errors.Is(err, objstore.ErrPublishedBad), c.published)
			}
			if res.UploadID != "" && !c.published {
				if err := s.AbortAssembly(ctx, b, key, res.UploadID); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFullObjectMode: where the server can (sources stored without a
// checksum, on versitygw), the whole object's CRC-32C is checked by the
// server at completion; where its copied parts misreport, the assembly
// fails with ErrChecksum and publishes nothing.
func TestFullObjectMode(t *testing.T) {
	s := newStore(t, objstore.S3Config{Checksum: objstore.ChecksumFullObject})
	b := newBucket(t, s, "full")
	ctx := context.Background()
	src := storetest.Bytes(5, 16<<20)
	if _, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String("plain"), Body: bytes.NewReader(src)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, b, "withcrc", src); err != nil {
		t.Fatal(err)
	}
	build := func(key string) ([]objstore.Piece, []byte) {
		p := []objstore.Piece{objstore.RangePiece(b, key, 0, 6<<20), objstore.RangePiece(b, key, 7<<20, 1000), objstore.DataPiece([]byte("f")), objstore.RangePiece(b, key, 8<<20, 7<<20)}
		want := append(append(append(bytes.Clone(src[:6<<20]), src[7<<20:7<<20+1000]...), 'f'), src[8<<20:15<<20]...)
		return p, want
	}
	pieces, want := build("plain")
	res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "ok", Pieces: pieces, ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
	if err != nil {
		t.Fatalf("full-object assembly: %v", err)
	}
	if got := storetest.ReadAll(t, s, b, "ok"); !bytes.Equal(got, want) {
		t.Fatal("full-object assembly differs")
	}
	if res.BytesFetched >= res.Size {
		t.Errorf("read back in full-object mode: %+v", res)
	}
	res, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "bad", Pieces: pieces, ExpectedCRC32C: bundlefmt.CRC32C(want) + 1, HasExpectedCRC32C: true})
	if !errors.Is(err, objstore.ErrChecksum) {
		t.Fatalf("wrong expected CRC: %v, want ErrChecksum", err)
	}
	if _, err := s.Head(ctx, b, "bad"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("wrong assembly published: %v", err)
	}
	if err := s.AbortAssembly(ctx, b, "bad", res.UploadID); err != nil {
		t.Fatal(err)
	}
	pieces, want = build("withcrc")
	res, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "misreported", Pieces: pieces, ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true})
	if !errors.Is(err, objstore.ErrChecksum) {
		t.Logf("ranged copies of a checksummed source: %v (server fixed?)", err)
	} else if _, err := s.Head(ctx, b, "misreported"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("misreported assembly published: %v", err)
	}
	if err := s.AbortAssembly(ctx, b, "misreported", res.UploadID); err != nil {
		t.Fatal(err)
	}
}

// TestResumeKeepsParts: a resumed upload keeps the parts it holds, uploads
// staged parts from the stager, and rebuilds a staged part that fails to
// load from source. The pieces carry their CRCs, as settle's do: a part
// the upload holds or the stager has is used only when its CRC-32C is the
// one the plan expects. Without the pieces' CRCs the plan knows none, and
// every part is rebuilt from source (the parts the upload holds are kept
// when the rebuilt bytes are theirs): nothing unchecked is uploaded.
func TestResumeKeepsParts(t *testing.T) {
	for _, withCRC := range []bool{true, false} {
		t.Run(fmt.Sprintf("crc=%v", withCRC), func(t *testing.T) {
			t.Parallel()
			resumeKeepsParts(t, withCRC)
		})
	}
}

func resumeKeepsParts(t *testing.T, withCRC bool) {
	s := newStore(t, objstore.S3Config{CopyConcurrency: 1, PartSize: 10 << 20})
	b := newBucket(t, s, "resume")
	ctx := context.Background()
	src := storetest.Bytes(6, 48<<20)
	if err := s.PutIfAbsent(ctx, b, "src", src); err != nil {
		t.Fatal(err)
	}
	var pieces []objstore.Piece
	var want []byte
	add := func(off, n int64) {
		p := objstore.RangePiece(b, "src", off, n)
		p.CRC32C, p.HasCRC32C = bundlefmt.CRC32C(src[off:off+n]), withCRC
		pieces = append(pieces, p)
		want = append(want, src[off:off+n]...)
	}
	for i := 0; i < 40; i++ { // 40 ranges of 600 KiB: gathered into 10 MiB parts
		add(int64(i)*(1<<20), 600<<10)
	}
	add(40<<20, 8<<20) // copied
	stager := storetest.NewMemStager()
	var uploadID string
	done := 0
	req := objstore.AssembleRequest{Bucket: b, Key: "out", Pieces: pieces, Stager: stager,
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true,
		Hooks: objstore.Hooks{
			UploadCreated: func(id string) error { uploadID = id; return nil },
			PartStaged: func(part int) error {
				if part == 3 {
					return errors.New("crash after staging part 3")
				}
				return nil
			},
			PartDone: func(int, bool) error { done++; return nil },
		}}
	first, err := s.Assemble(ctx, req)
	if err == nil {
		t.Fatal("no crash")
	}
	parts, err := s.ListParts(ctx, b, "out", uploadID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crashed with %d parts uploaded, %d staged; %+v", len(parts), len(stager.Parts), first)
	if len(parts) == 0 || len(stager.Parts) <= len(parts) {
		t.Fatalf("want some parts uploaded and one more staged: %d uploaded, %d staged", len(parts), len(stager.Parts))
	}
	delete(stager.Parts, 1) // a sidecar lost: the part is still in the upload
	req.UploadID, req.Hooks = uploadID, objstore.Hooks{}
	loads, staged := stager.Loaded, stager.Staged
	res, err := s.Assemble(ctx, req)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := storetest.ReadAll(t, s, b, "out"); !bytes.Equal(got, want) {
		t.Fatal("resumed object differs")
	}
	t.Logf("resume: %+v, %d loads, %d staged", res, stager.Loaded-loads, stager.Staged-staged)
	// Parts 1 and 2 are kept (1 rebuilt from source to check it, 2 checked
	// from its sidecar, or by the CRC the server reports for it where it
	// does; without the pieces' CRCs both are rebuilt from source), 3 is
	// uploaded (from its sidecar when its CRC is known, else rebuilt and
	// staged again), 4 copied; the other fetched bytes are the read-back.
	if res.BytesUploaded >= int64(len(want))-8<<20 {
		t.Errorf("resume uploaded %d bytes: kept parts were redone", res.BytesUploaded)
	}
	switch n := stager.Loaded - loads; {
	case withCRC && (n < 1 || n > 2 || stager.Staged != staged):
		t.Errorf("%d loads, %d parts staged again: want part 3 uploaded from its sidecar", stager.Loaded-loads, stager.Staged-staged)
	case !withCRC && (stager.Loaded != loads || stager.Staged-staged != 1):
		t.Errorf("%d loads, %d parts staged again: want no sidecar used unchecked, part 3 rebuilt", stager.Loaded-loads, stager.Staged-staged)
	}
}
