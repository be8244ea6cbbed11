package s3store

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// uploadLog records the CRC-32C of every UploadPart body sent (copies
// excluded).
type uploadLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	crcs []string
}

func (u *uploadLog) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	if r.Method == http.MethodPut && q.Has("partNumber") && q.Has("uploadId") && r.Header.Get("x-amz-copy-source") == "" {
		u.mu.Lock()
		u.crcs = append(u.crcs, r.Header.Get("x-amz-checksum-crc32c"))
		u.mu.Unlock()
	}
	return u.next.RoundTrip(r)
}

func (u *uploadLog) sent(crc uint32) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.crcs {
		if c == objstore.EncodeCRC32C(crc) {
			return true
		}
	}
	return false
}

// otherPlans are two plans of one key with the same part layout and other
// bytes in every part, as a publish intent reopened after the write path
// absorbed more or under another erasure set plans it: 3 MiB of one
// source gathered with the 2 MiB head of a 12 MiB range of another (part
// 1: a source range split between parts, so the plan knows no CRC for it
// without its bytes), the rest of that range copied (part 2: no CRC known
// either), and local bytes (part 3).
func otherPlans(t *testing.T, s *Store, b string) (a, other []objstore.Piece, wantA, want []byte) {
	t.Helper()
	const mib = 1 << 20
	ctx := context.Background()
	src0, src1 := storetest.Bytes(11, 16*mib), storetest.Bytes(12, 6*mib)
	for k, d := range map[string][]byte{"src0": src0, "src1": src1} {
		if err := s.PutIfAbsent(ctx, b, k, d); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(off1, off0 int, local []byte) ([]objstore.Piece, []byte) {
		r1, r0 := src1[off1:off1+3*mib], src0[off0:off0+12*mib]
		p1 := objstore.RangePiece(b, "src1", int64(off1), 3*mib)
		p1.CRC32C, p1.HasCRC32C = bundlefmt.CRC32C(r1), true
		p0 := objstore.RangePiece(b, "src0", int64(off0), 12*mib)
		p0.CRC32C, p0.HasCRC32C = bundlefmt.CRC32C(r0), true
		return []objstore.Piece{p1, p0, objstore.DataPiece(local)}, append(append(append([]byte(nil), r1...), r0...), local...)
	}
	a, wantA = plan(0, 0, storetest.Bytes(13, 5000))
	other, want = plan(mib, 4*mib, storetest.Bytes(14, 5000))
	specs := make([]objstore.PieceSpec, len(a))
	for i, p := range a {
		specs[i] = objstore.PieceSpec{Len: p.Size(), Copy: p.SrcKey != ""}
	}
	pl, err := objstore.PlanParts(specs, s.Limits())
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Parts) != 3 || pl.Parts[0].Copy || len(pl.Parts[0].Segments) != 2 || pl.Parts[0].Segments[1].Len == a[1].Len ||
		!pl.Parts[1].Copy || pl.Parts[1].Size == a[1].Len {
		t.Fatalf("the plans are not shaped as the test needs: %+v", pl)
	}
	return a, other, wantA, want
}

// TestResumeWithAnotherPlan: a publish intent reopened with another plan
// of the same key resumes the upload the earlier plan left, and finds that
// plan's parts: staged as sidecars and uploaded. None of them is this
// plan's, though each has the size this plan gives its part, and for parts
// 1 and 2 the plan knows no CRC without the bytes. They are rebuilt from
// source (a stale sidecar is never uploaded, a stale upload part is
// replaced), so the resume publishes this plan's object, never a checksum
// failure or a wrong object.
func TestResumeWithAnotherPlan(t *testing.T) {
	for _, crashAt := range []string{"after every part", "after staging part 1"} {
		t.Run(crashAt, func(t *testing.T) {
			t.Parallel()
			log := &uploadLog{next: http.DefaultTransport}
			s := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: log}})
			b := newBucket(t, s, "replan")
			ctx := context.Background()
			a, other, wantA, want := otherPlans(t, s, b)
			stager := storetest.NewMemStager()
			crash := errors.New("simulated crash")
			var uploadID string
			done := 0
			hooks := objstore.Hooks{UploadCreated: func(id string) error { uploadID = id; return nil }}
			if crashAt == "after every part" {
				hooks.PartDone = func(int, bool) error {
					if done++; done == 3 {
						return crash
					}
					return nil
				}
			} else {
				hooks.PartStaged = func(part int) error {
					if part == 1 {
						return crash
					}
					return nil
				}
			}
			if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out", Pieces: a, Stager: stager,
				ExpectedCRC32C: bundlefmt.CRC32C(wantA), HasExpectedCRC32C: true, Hooks: hooks}); !errors.Is(err, crash) {
				t.Fatalf("the first plan's assembly: %v, want the crash", err)
			}
			stale, ok := stager.Parts[1]
			if !ok || !bytes.Equal(stale, wantA[:len(stale)]) {
				t.Fatal("the first plan's part 1 is not staged")
			}
			if parts, err := s.ListParts(ctx, b, "out", uploadID); err != nil || (crashAt == "after every part") != (len(parts) == 3) {
				t.Fatalf("parts of the first plan's upload: %+v %v", parts, err)
			}
			res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out", Pieces: other, Stager: stager,
				ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true, UploadID: uploadID})
			if err != nil {
				t.Fatalf("resume under the other plan: %v", err)
			}
			if got := storetest.ReadAll(t, s, b, "out"); !bytes.Equal(got, want) {
				t.Fatal("the published object is not the other plan's")
			}
			if crashAt == "after staging part 1" && log.sent(bundlefmt.CRC32C(stale)) {
				t.Fatal("the first plan's staged part 1 was uploaded")
			}
			if !bytes.Equal(stager.Parts[1], want[:len(stale)]) {
				t.Error("the stale sidecar of part 1 was not replaced by the other plan's")
			}
			t.Logf("resume: %+v", res)
		})
	}
}

// TestLatePartBeforeComplete: a part request of an earlier attempt lands
// after this assembly made the part, replacing it with other bytes (a
// process that died or was paused with its request already sent). The
// complete is refused (InvalidPart), the parts are listed again, the
// replaced part is made again, and the object published is this plan's.
func TestLatePartBeforeComplete(t *testing.T) {
	ft := &faultyTransport{base: http.DefaultTransport.(*http.Transport).Clone(), hits: map[string]int{}}
	s := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: ft}})
	b := newBucket(t, s, "late")
	ctx := context.Background()
	_, other, _, want := otherPlans(t, s, b)
	late := storetest.Bytes(15, len(other[2].Data)) // another plan's part 3
	var uploadID string
	landed := false
	hooks := objstore.Hooks{
		UploadCreated: func(id string) error { uploadID = id; return nil },
		PartDone: func(part int, _ bool) error {
			if part != 3 || landed {
				return nil
			}
			landed = true
			crc := objstore.EncodeCRC32C(bundlefmt.CRC32C(late))
			fk := s.cfg.KeyPrefix + "out"
			_, err := s.Client().UploadPart(ctx, &s3.UploadPartInput{Bucket: &b, Key: &fk, UploadId: &uploadID,
				PartNumber: aws.Int32(3), Body: bytes.NewReader(late), ContentLength: aws.Int64(int64(len(late))),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumCRC32C: &crc})
			return err
		},
	}
	ft.set()
	if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: b, Key: "out", Pieces: other, Stager: storetest.NewMemStager(),
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true, Hooks: hooks}); err != nil {
		t.Fatalf("assemble with a late part: %v", err)
	}
	if !landed {
		t.Fatal("no late part was sent")
	}
	if n := ft.seen("CompleteMultipartUpload"); n != 2 {
		t.Fatalf("%d completes, want 2 (refused, then after the part was made again)", n)
	}
	if got := storetest.ReadAll(t, s, b, "out"); !bytes.Equal(got, want) {
		t.Fatal("the published object is not the plan's")
	}
}
