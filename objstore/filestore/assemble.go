package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/fsync"
	"github.com/nova/auditor/objstore"
)

// An upload is the directory <bucket>/.nova-tmp/upload-<id> holding "key"
// (the key it builds) and "data" (the bytes so far). Copies are local, so a
// resumed upload rebuilds its data from the start; the whole object is one
// part, reported by ListParts once written.

var uploadIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (s *Store) uploadDir(bucket, id string) string {
	return filepath.Join(s.bucketDir(bucket), tmpDirName, "upload-"+id)
}

// lockUpload serialises work on one upload within the process.
func (s *Store) lockUpload(id string) func() {
	var h uint32
	for i := 0; i < len(id); i++ {
		h = h*31 + uint32(id[i])
	}
	m := &s.uploadLocks[h%uint32(len(s.uploadLocks))]
	m.Lock()
	return m.Unlock
}

// openUpload checks that the upload exists and builds key.
func (s *Store) openUpload(bucket, key, id string) (string, error) {
	if !uploadIDRE.MatchString(id) {
		return "", fmt.Errorf("upload %q: %w", id, objstore.ErrNoUpload)
	}
	dir := s.uploadDir(bucket, id)
	k, err := os.ReadFile(filepath.Join(dir, "key"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("upload %s: %w", id, objstore.ErrNoUpload)
	}
	if err != nil {
		return "", err
	}
	if string(k) != key {
		return "", fmt.Errorf("upload %s builds %q, not %q: %w", id, k, key, objstore.ErrNoUpload)
	}
	return dir, nil
}

// build is Assemble (observe.go): the pieces are copied into the
// upload's data file (reflinked where the filesystem can, else
// copy_file_range; see copyRange), the file is synced and checked against
// ExpectedCRC32C (read whole: Verified), then hard-linked into place.
// Hooks: UploadCreated, PartDone(1, true) once the data is durable,
// Completed. The Stager is not used: nothing is gathered in memory.
func (s *Store) build(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	res := objstore.AssembleResult{UploadID: req.UploadID, Size: req.Size()}
	err := s.assemble(ctx, req, &res)
	if err != nil {
		err = fmt.Errorf("assemble %s/%s: %w", req.Bucket, req.Key, err)
	}
	return res, err
}

func (s *Store) assemble(ctx context.Context, req objstore.AssembleRequest, res *objstore.AssembleResult) error {
	dst, err := s.Path(req.Bucket, req.Key)
	if err != nil {
		return err
	}
	if err := s.checkBucket(req.Bucket); err != nil {
		return err
	}
	for i, p := range req.Pieces {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("piece %d: %w", i, err)
		}
		if p.SrcKey == "" && p.HasCRC32C && bundlefmt.CRC32C(p.Data) != p.CRC32C {
			return fmt.Errorf("piece %d: local bytes: %w", i, objstore.ErrChecksum)
		}
	}
	var dir string
	id := req.UploadID
	if id == "" {
		id = randomID()
	}
	defer s.lockUpload(id)()
	if req.UploadID == "" {
		dir = s.uploadDir(req.Bucket, id)
		if err := s.createUpload(dir, req.Key); err != nil {
			return err
		}
		res.UploadID = id
		if err := req.Hooks.CallUploadCreated(id); err != nil {
			if rerr := os.RemoveAll(dir); rerr != nil {
				return errors.Join(err, rerr)
			}
			res.UploadID = ""
			return err
		}
	} else if dir, err = s.openUpload(req.Bucket, req.Key, req.UploadID); err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	if err := s.fill(ctx, data, req, res); err != nil {
		return err
	}
	res.Parts = 1
	if err := req.Hooks.CallPartDone(1, true); err != nil {
		return err
	}
	if req.HasExpectedCRC32C {
		crc, n, err := fileCRC(data)
		res.BytesFetched += n
		res.BytesReadBack += n
		objstore.ObserverFrom(ctx).Bytes(objstore.ReadBack, n)
		if err != nil {
			return err
		}
		if crc != req.ExpectedCRC32C {
			return fmt.Errorf("assembled CRC %08x, expected %08x: %w", crc, req.ExpectedCRC32C, objstore.ErrChecksum)
		}
		res.Verified = true
	}
	if err := s.publish(req.Bucket, data, dst); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove upload %s: %w", res.UploadID, err)
	}
	return req.Hooks.CallCompleted()
}

func (s *Store) createUpload(dir, key string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "key"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := fsync.Dir(dir); err != nil {
		return err
	}
	return fsync.Dir(filepath.Dir(dir))
}

// fill (re)writes the upload's data file from the pieces and syncs it. It
// writes a fresh file and renames it over data, never truncating data in
// place: a crash between publishing (data hard-linked to the key) and
// removing the upload leaves data and the published object one inode, and
// a resumed upload must not rewrite the published bytes (it then meets the
// taken key and reports ErrExists).
func (s *Store) fill(ctx context.Context, path string, req objstore.AssembleRequest, res *objstore.AssembleResult) (err error) {
	next := path + ".next"
	if err := s.fillFile(ctx, next, req, res); err != nil {
		return err
	}
	if err := os.Rename(next, path); err != nil {
		return err
	}
	return fsync.Dir(filepath.Dir(path))
}

func (s *Store) fillFile(ctx context.Context, path string, req objstore.AssembleRequest, res *objstore.AssembleResult) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	for i, p := range req.Pieces {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.SrcKey == "" {
			if _, err := f.Write(p.Data); err != nil {
				return err
			}
			res.BytesUploaded += int64(len(p.Data))
			objstore.ObserverFrom(ctx).Bytes(objstore.Uploaded, int64(len(p.Data)))
			continue
		}
		if p.Len == 0 {
			continue
		}
		if err := s.copyPiece(f, p); err != nil {
			return fmt.Errorf("piece %d (%s/%s [%d,+%d)): %w", i, p.SrcBucket, p.SrcKey, p.Off, p.Len, err)
		}
		res.BytesCopied += p.Len
		objstore.ObserverFrom(ctx).Bytes(objstore.Copied, p.Len)
	}
	return f.Sync()
}

func (s *Store) copyPiece(dst *os.File, p objstore.Piece) error {
	srcErr := func(err error) error { return &objstore.SourceError{Bucket: p.SrcBucket, Key: p.SrcKey, Err: err} }
	src, fi, err := s.open(p.SrcBucket, p.SrcKey)
	if err != nil {
		return srcErr(err)
	}
	defer src.Close() //nolint:errcheck // read-only: nothing to flush, the copy's errors are returned
	if p.SrcETag != "" && etag(fi) != p.SrcETag {
		return srcErr(objstore.ErrSourceChanged)
	}
	if p.Off+p.Len > fi.Size() {
		return srcErr(fmt.Errorf("source has %d bytes: %w", fi.Size(), objstore.ErrInvalidRange))
	}
	return copyRange(dst, src, p.Off, p.Len)
}

func fileCRC(path string) (uint32, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close() //nolint:errcheck // read-only: nothing to flush, io.Copy's error is returned
	h := bundlefmt.NewCRC32C()
	n, err := io.Copy(h, f)
	return h.Sum32(), n, err
}

// abortAssembly is AbortAssembly (observe.go).
func (s *Store) abortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	if _, err := s.Path(bucket, key); err != nil {
		return err
	}
	defer s.lockUpload(uploadID)()
	dir, err := s.openUpload(bucket, key, uploadID)
	if errors.Is(err, objstore.ErrNoUpload) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("abort upload %s: %w", uploadID, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("abort upload %s: %w", uploadID, err)
	}
	return fsync.Dir(filepath.Dir(dir))
}

// listParts is ListParts (observe.go): one part once data is written.
func (s *Store) listParts(ctx context.Context, bucket, key, uploadID string) ([]objstore.PartInfo, error) {
	if _, err := s.Path(bucket, key); err != nil {
		return nil, err
	}
	dir, err := s.openUpload(bucket, key, uploadID)
	if err != nil {
		return nil, fmt.Errorf("list parts: %w", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list parts of upload %s: %w", uploadID, err)
	}
	return []objstore.PartInfo{{Number: 1, Size: fi.Size(), ETag: etag(fi)}}, nil
}

// listAssemblies is ListAssemblies (observe.go): it reads the key of every
// upload directory of the bucket.
func (s *Store) listAssemblies(ctx context.Context, bucket, key string) ([]string, error) {
	if _, err := s.Path(bucket, key); err != nil {
		return nil, err
	}
	if err := s.checkBucket(bucket); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(s.bucketDir(bucket), tmpDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list uploads of %s: %w", key, err)
	}
	var ids []string
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), "upload-")
		if !ok || !uploadIDRE.MatchString(id) {
			continue
		}
		k, err := os.ReadFile(filepath.Join(s.uploadDir(bucket, id), "key"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // aborted or completed meanwhile, or created without its key yet
		}
		if err != nil {
			return nil, fmt.Errorf("list uploads of %s: %w", key, err)
		}
		if string(k) == key {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
