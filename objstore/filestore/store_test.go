package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

func newStore(t *testing.T, prefix string) *Store {
	t.Helper()
	s, err := New(objstore.FileConfig{Root: t.TempDir(), KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	for _, prefix := range []string{"", "nova/"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			s := newStore(t, prefix)
			var n atomic.Int64
			storetest.Run(t, storetest.Harness{Store: s, NewBucket: func(t *testing.T) string {
				b := "b" + string(rune('a'+n.Add(1)%26)) + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
				b = strings.Map(func(r rune) rune {
					if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
						return r
					}
					return '-'
				}, b)
				if len(b) > 60 {
					b = b[:60]
				}
				if err := s.CreateBucket(b); err != nil {
					t.Fatal(err)
				}
				return b
			}})
		})
	}
}

// TestLayout: the object with key K in bucket B is exactly <root>/B/K, and
// temporary files are where no key can name them.
func TestLayout(t *testing.T) {
	root := t.TempDir()
	s, err := New(objstore.FileConfig{Root: root, KeyPrefix: "p/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateBucket("std"); err != nil {
		t.Fatal(err)
	}
	key := "buckets/b1/streams/00ff/00000000000000000001/00000000000000000000~0"
	if err := s.PutIfAbsent(ctx, "std", key, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "std", "p", filepath.FromSlash(key)))
	if err != nil || string(got) != "hello" {
		t.Fatalf("plain file read: %q, %v", got, err)
	}
	res, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: "std", Key: "x/y", Pieces: []objstore.Piece{
		objstore.RangePiece("std", key, 1, 3), objstore.DataPiece([]byte("!")),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "std", "p", "x", "y")); string(got) != "ell!" {
		t.Fatalf("assembled file holds %q", got)
	}
	if res.BytesCopied != 3 || res.BytesUploaded != 1 {
		t.Errorf("result %+v", res)
	}
	// nothing is left in the temporary directory, and List does not see it
	entries, _ := os.ReadDir(filepath.Join(root, "std", tmpDirName))
	if len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
	var keys []string
	if err := s.List(ctx, "std", "", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Errorf("listed %v", keys)
	}
	// deleting the last key of a directory removes the emptied directories
	if err := s.Delete(ctx, "std", []string{key, "x/y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "std", "p")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("emptied directories remain: %v", err)
	}
	// a key that is a prefix of another key is not an object and cannot be created
	if err := s.PutIfAbsent(ctx, "std", "a/b", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "std", "a", []byte("2")); err == nil || errors.Is(err, objstore.ErrExists) {
		t.Errorf("put over a directory: %v, want a conflict that is not ErrExists", err)
	}
	if err := s.PutIfAbsent(ctx, "std", "a/b/c", []byte("3")); err == nil || errors.Is(err, objstore.ErrExists) {
		t.Errorf("put under a file: %v, want a conflict that is not ErrExists", err)
	}
}

// TestCrashLeftovers: a crash between writing a temporary file and linking
// it leaves only an invisible temporary, removed once stale; an upload's
// directory survives for resume.
func TestCrashLeftovers(t *testing.T) {
	root := t.TempDir()
	s, err := New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	tmp, err := s.tempFile("b", "put-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString("torn"); err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(tmp.Name(), old, old); err != nil {
		t.Fatal(err)
	}
	var id string
	_, err = s.Assemble(context.Background(), objstore.AssembleRequest{Bucket: "b", Key: "k", Pieces: []objstore.Piece{objstore.DataPiece([]byte("data"))},
		Hooks: objstore.Hooks{UploadCreated: func(u string) error { id = u; return nil }, PartDone: func(int, bool) error { return errors.New("crash") }}})
	if err == nil {
		t.Fatal("no crash")
	}
	if _, err := New(objstore.FileConfig{Root: root}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp.Name()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary survived reopening: %v", err)
	}
	parts, err := s.ListParts(context.Background(), "b", "k", id)
	if err != nil || len(parts) != 1 || parts[0].Size != 4 {
		t.Fatalf("upload after reopening: %v, %v", parts, err)
	}
	_, err = s.Assemble(context.Background(), objstore.AssembleRequest{Bucket: "b", Key: "k", UploadID: id, Pieces: []objstore.Piece{objstore.DataPiece([]byte("data"))}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "b", "k")); !bytes.Equal(got, []byte("data")) {
		t.Fatalf("resumed file holds %q", got)
	}
	if err := s.AbortAssembly(context.Background(), "b", "k", "../../etc"); err != nil {
		t.Errorf("abort of a malformed upload ID: %v", err)
	}
}

// TestResumeAfterPublishBeforeCleanup: a crash between hard-linking the
// upload's data into place and removing the upload leaves the upload open
// with its data file being the published object. Resuming it (with other
// bytes, as a re-planned publish would) must not touch the published
// object: the key is taken, ErrExists.
func TestResumeAfterPublishBeforeCleanup(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	var id string
	_, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: "b", Key: "k", Pieces: []objstore.Piece{objstore.DataPiece([]byte("published bytes"))},
		Hooks: objstore.Hooks{UploadCreated: func(u string) error { id = u; return nil }, PartDone: func(int, bool) error { return errors.New("crash") }}})
	if err == nil || id == "" {
		t.Fatalf("no interrupted upload: %v", err)
	}
	dst, err := s.Path("b", "k")
	if err != nil {
		t.Fatal(err)
	}
	// what publish did just before the crash
	if err := s.publish("b", filepath.Join(s.uploadDir("b", id), "data"), dst); err != nil {
		t.Fatal(err)
	}
	_, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: "b", Key: "k", UploadID: id,
		Pieces: []objstore.Piece{objstore.DataPiece([]byte("other"))}})
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("resume onto the published key: %v, want ErrExists", err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "published bytes" {
		t.Fatalf("the published object now holds %q", got)
	}
	if err := s.AbortAssembly(ctx, "b", "k", id); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "published bytes" {
		t.Fatalf("abort changed the published object: %q", got)
	}
}

// TestCopyRangeClonesOrCopies assembles from block-aligned and unaligned
// ranges, which are reflinked where the filesystem can and copied where
// not, and logs which this machine's filesystem does.
func TestCopyRangeClonesOrCopies(t *testing.T) {
	dir := t.TempDir()
	t.Logf("FICLONERANGE under %s: %v (nil: reflinks)", dir, CanClone(dir))
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want := make([]byte, 5*cloneBlock+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if _, err := src.Write(want); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	// aligned prefix (cloned where possible) with an unaligned rest, then
	// an unaligned range at an unaligned position
	if err := copyRange(dst, src, 0, 3*cloneBlock+10); err != nil {
		t.Fatal(err)
	}
	if err := copyRange(dst, src, 3*cloneBlock+10, int64(len(want))-3*cloneBlock-10); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "dst"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copied %d bytes (%v), differ from the source", len(got), err)
	}
}

// TestBucketRulesKeepNothingDeleted: a directory has no lifecycle rules or
// encryption (unknown), and no versioning or Object Lock: a deleted file
// is gone, so a DELETE keeps nothing.
func TestBucketRulesKeepNothingDeleted(t *testing.T) {
	s := newStore(t, "")
	r, err := s.BucketRules(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	v := r.Judge([]string{"stars/s1/"})
	if v.AbortIncomplete != objstore.VerdictUnknown || v.Encryption != objstore.VerdictUnknown ||
		v.Versioning != objstore.VersioningOff || v.ObjectLock != objstore.VerdictNo || v.KeepsDeleted() != objstore.VerdictNo {
		t.Fatalf("the file backend's verdict: %+v", v)
	}
}

// TestConcurrentDeletesOfADirectorysLastKeys: two Deletes of the last keys
// of one directory at once both succeed, though the first to finish prunes
// the directory the other then syncs (as the reap's concurrent batches of
// one key each do at an epoch's last slots).
func TestConcurrentDeletesOfADirectorysLastKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, "")
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		keys := []string{fmt.Sprintf("d/%d/x", i), fmt.Sprintf("d/%d/y", i)}
		for _, k := range keys {
			if err := s.PutIfAbsent(ctx, "b", k, []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, len(keys))
		for _, k := range keys {
			go func() { errs <- s.Delete(ctx, "b", []string{k}) }()
		}
		for range keys {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
}
