// Package filestore is the file backend of objstore.Store: bucket B is the
// directory <root>/B and key K in it the file <root>/B/<prefix>K, so plain
// file tools read the store. Create-once writes go to a temporary file in
// <root>/B/.nova-tmp (a name no key can take) and are hard-linked into
// place, which fails if the key exists; files and directories are fsynced.
// Crash-safe, and safe for concurrent use within one process.
package filestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nova/auditor/fsync"
	"github.com/nova/auditor/objstore"
)

// tmpDirName holds temporary files and uploads inside each bucket.
const tmpDirName = objstore.ReservedPrefix + "tmp"

// uploadMaxAge: uploads untouched this long are removed at open, as S3's
// recommended AbortIncompleteMultipartUpload rule would (docs/architecture.md#trim).
const uploadMaxAge = 7 * 24 * time.Hour

var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Store is objstore.Store on a local directory.
type Store struct {
	root, prefix string

	// uploadLocks serialise work on one upload (striped by its ID)
	uploadLocks [64]sync.Mutex
}

var _ objstore.Store = (*Store)(nil)

// New opens the store at cfg.Root (creating the directory if needed) and
// removes leftover temporary files older than cfg.TempMaxAge (default 1h)
// and uploads older than seven days.
func New(cfg objstore.FileConfig) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("file store config: %w", err)
	}
	if cfg.TempMaxAge == 0 {
		cfg.TempMaxAge = time.Hour
	}
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	s := &Store{root: cfg.Root, prefix: cfg.KeyPrefix}
	s.cleanTemp(time.Now(), cfg.TempMaxAge)
	return s, nil
}

// cleanTemp removes stale temporaries; best effort.
func (s *Store) cleanTemp(now time.Time, maxAge time.Duration) {
	buckets, _ := os.ReadDir(s.root)
	for _, b := range buckets {
		dir := filepath.Join(s.root, b.Name(), tmpDirName)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			age := now.Sub(fi.ModTime())
			if (strings.HasPrefix(e.Name(), "put-") && age > maxAge) || (strings.HasPrefix(e.Name(), "upload-") && age > uploadMaxAge) {
				_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// CreateBucket makes the bucket's directory; an existing one is fine.
func (s *Store) CreateBucket(bucket string) error {
	if !bucketRE.MatchString(bucket) {
		return fmt.Errorf("create bucket %q: %w", bucket, objstore.ErrInvalidKey)
	}
	if err := os.Mkdir(filepath.Join(s.root, bucket), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return fsync.Dir(s.root)
}

// Path returns the file that holds bucket/key.
func (s *Store) Path(bucket, key string) (string, error) {
	if !bucketRE.MatchString(bucket) {
		return "", fmt.Errorf("bucket %q: %w", bucket, objstore.ErrInvalidKey)
	}
	if err := objstore.ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, bucket, filepath.FromSlash(s.prefix+key)), nil
}

func (s *Store) bucketDir(bucket string) string { return filepath.Join(s.root, bucket) }

// checkBucket returns ErrBucketNotFound for a missing bucket.
func (s *Store) checkBucket(bucket string) error {
	fi, err := os.Stat(s.bucketDir(bucket))
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("bucket %s: %w", bucket, objstore.ErrBucketNotFound)
	}
	return nil
}

// notFound maps a failed open or stat of an object.
func (s *Store) notFound(bucket, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		if berr := s.checkBucket(bucket); berr != nil {
			return berr
		}
		return fmt.Errorf("%s/%s: %w", bucket, key, objstore.ErrNotFound)
	}
	return fmt.Errorf("%s/%s: %w", bucket, key, err)
}

// open opens an object for reading; directories are not objects.
func (s *Store) open(bucket, key string) (*os.File, os.FileInfo, error) {
	p, err := s.Path(bucket, key)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, s.notFound(bucket, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // read-only, and Stat's error is the one to return
		return nil, nil, fmt.Errorf("%s/%s: %w", bucket, key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close() // read-only, and it is not an object
		return nil, nil, fmt.Errorf("%s/%s: %w", bucket, key, objstore.ErrNotFound)
	}
	return f, fi, nil
}

// etag identifies one file: objects never change in place, so inode, size
// and modification time tell a re-created object from the original.
func etag(fi os.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf(`"%x-%x-%x"`, ino, fi.Size(), fi.ModTime().UnixNano())
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	if off < 0 || n <= 0 {
		return nil, 0, fmt.Errorf("get %s/%s: bad range %d+%d", bucket, key, off, n)
	}
	f, fi, err := s.open(bucket, key)
	if err != nil {
		return nil, 0, fmt.Errorf("get: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only: nothing to flush, ReadAt's error is returned
	size := fi.Size()
	if off >= size {
		return nil, 0, fmt.Errorf("get %s/%s [%d,+%d) of %d bytes: %w", bucket, key, off, n, size, objstore.ErrInvalidRange)
	}
	buf := make([]byte, min(n, size-off))
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return buf, size, nil
}

// GetSuffix implements objstore.Store.
func (s *Store) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	if n <= 0 {
		return nil, 0, fmt.Errorf("get %s/%s: bad suffix length %d", bucket, key, n)
	}
	f, fi, err := s.open(bucket, key)
	if err != nil {
		return nil, 0, fmt.Errorf("get: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only: nothing to flush, ReadAt's error is returned
	size := fi.Size()
	if size == 0 {
		return nil, 0, nil
	}
	buf := make([]byte, min(n, size))
	if _, err := f.ReadAt(buf, size-int64(len(buf))); err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return buf, size, nil
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, bucket, key string) (objstore.Attrs, error) {
	p, err := s.Path(bucket, key)
	if err != nil {
		return objstore.Attrs{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return objstore.Attrs{}, fmt.Errorf("head: %w", s.notFound(bucket, key, err))
	}
	if !fi.Mode().IsRegular() {
		return objstore.Attrs{}, fmt.Errorf("head %s/%s: %w", bucket, key, objstore.ErrNotFound)
	}
	return objstore.Attrs{Size: fi.Size(), ETag: etag(fi)}, nil
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	dst, err := s.Path(bucket, key)
	if err != nil {
		return err
	}
	if err := s.checkBucket(bucket); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	tmp, err := s.tempFile(bucket, "put-")
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	name := tmp.Name()
	defer os.Remove(name) //nolint:errcheck // the temporary file: gone after the rename (ENOENT), removed on failure
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	if err := s.publish(bucket, name, dst); err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return nil
}

// tempFile creates a new file in the bucket's temporary directory.
func (s *Store) tempFile(bucket, kind string) (*os.File, error) {
	dir := filepath.Join(s.bucketDir(bucket), tmpDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, kind+randomID()), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return hex.EncodeToString(b)
}

// publish hard-links the synced file src to dst, failing with ErrExists if
// dst exists, and makes the new name durable. A concurrent Delete may
// remove an emptied parent directory between mkdir and link; that is
// retried.
func (s *Store) publish(bucket, src, dst string) error {
	for attempt := 0; ; attempt++ {
		if err := s.mkdirAll(bucket, filepath.Dir(dst)); err != nil {
			return err
		}
		err := os.Link(src, dst)
		switch {
		case err == nil:
			return fsync.Dir(filepath.Dir(dst))
		case errors.Is(err, fs.ErrExist):
			if fi, serr := os.Lstat(dst); serr == nil && fi.IsDir() {
				return fmt.Errorf("the key is a prefix of other keys here: %w", err)
			}
			return objstore.ErrExists
		case errors.Is(err, fs.ErrNotExist) && attempt < 10:
			continue
		default:
			return err
		}
	}
}

// mkdirAll creates dir and its missing parents below the bucket directory,
// syncing each parent that gains an entry.
func (s *Store) mkdirAll(bucket, dir string) error {
	base := s.bucketDir(bucket)
	rel, err := filepath.Rel(base, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := base
	for _, seg := range strings.Split(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, seg)
		if err := os.Mkdir(next, 0o755); err == nil {
			if err := fsync.Dir(cur); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			if errors.Is(err, syscall.ENOTDIR) {
				return fmt.Errorf("a key is a prefix of this key: %w", err)
			}
			return err
		}
		cur = next
	}
	return nil
}

// Delete implements objstore.Store. Emptied directories are removed.
func (s *Store) Delete(ctx context.Context, bucket string, keys []string) error {
	failed := map[string]error{}
	berr := s.checkBucket(bucket)
	for _, k := range keys {
		if berr != nil {
			failed[k] = berr
			continue
		}
		p, err := s.Path(bucket, k)
		if err != nil {
			failed[k] = err
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			continue // a prefix of other keys, not an object
		}
		err = os.Remove(p)
		switch {
		case err == nil:
			// A concurrent Delete may have pruned the directory, empty
			// once this key went: then there is nothing left to sync.
			if err := fsync.Dir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				failed[k] = err
				continue
			}
			s.pruneDirs(bucket, filepath.Dir(p))
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		default:
			failed[k] = err
		}
	}
	if len(failed) > 0 {
		return &objstore.DeleteError{Bucket: bucket, Failed: failed}
	}
	return nil
}

// pruneDirs removes empty directories from dir up to the bucket.
func (s *Store) pruneDirs(bucket, dir string) {
	base := s.bucketDir(bucket)
	for dir != base && strings.HasPrefix(dir, base+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		_ = fsync.Dir(filepath.Dir(dir))
		dir = filepath.Dir(dir)
	}
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error {
	if err := s.checkBucket(bucket); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	base := s.bucketDir(bucket)
	full := s.prefix + prefix
	start := base
	if i := strings.LastIndex(full, "/"); i >= 0 {
		start = filepath.Join(base, filepath.FromSlash(full[:i]))
	}
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			if d.Name() == tmpDirName {
				return filepath.SkipDir
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		k, ok := strings.CutPrefix(filepath.ToSlash(rel), s.prefix)
		if !ok || !strings.HasPrefix(k, prefix) || !d.Type().IsRegular() || objstore.ValidKey(k) != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		return fn(objstore.ObjectInfo{Key: k, Size: fi.Size(), LastModified: fi.ModTime()})
	})
	if err != nil {
		return fmt.Errorf("list %s/%s: %w", bucket, prefix, err)
	}
	return nil
}

// copyRange appends n bytes of src at off to dst at its current offset,
// with copy_file_range where the kernel supports it ((*os.File).ReadFrom
// uses it for an *io.LimitedReader over an *os.File).
// copyRange appends [off, off+n) of src to dst: the block-aligned part
// shared by reflink where the filesystem offers it (FICLONERANGE: btrfs,
// XFS), the rest by copy_file_range (File.ReadFrom), which copies inside
// the kernel (ext4 copies the blocks; no byte passes through the process).
func copyRange(dst, src *os.File, off, n int64) error {
	cloned, err := cloneRange(dst, src, off, n)
	if err != nil {
		return err
	}
	off, n = off+cloned, n-cloned
	if n == 0 {
		return nil
	}
	if _, err := src.Seek(off, io.SeekStart); err != nil {
		return err
	}
	got, err := dst.ReadFrom(&io.LimitedReader{R: src, N: n})
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("copied %d of %d bytes: %w", got, n, objstore.ErrInvalidRange)
	}
	return nil
}

// cloneBlock is the alignment FICLONERANGE needs of offsets and lengths
// (the filesystem block; a filesystem with larger blocks refuses, and the
// bytes are copied).
const cloneBlock = 4096

// cloneRange shares the longest block-aligned prefix of [off, off+n) of
// src at dst's end by FICLONERANGE and returns its length; 0 (no error)
// when the offsets are not aligned or the filesystem cannot clone.
func cloneRange(dst, src *os.File, off, n int64) (int64, error) {
	pos, err := dst.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	l := n / cloneBlock * cloneBlock
	if off%cloneBlock != 0 || pos%cloneBlock != 0 || l == 0 {
		return 0, nil
	}
	if err := unix.IoctlFileCloneRange(int(dst.Fd()), &unix.FileCloneRange{
		Src_fd: int64(src.Fd()), Src_offset: uint64(off), Src_length: uint64(l), Dest_offset: uint64(pos),
	}); err != nil {
		return 0, nil // EOPNOTSUPP (ext4), EXDEV, EINVAL: copy instead
	}
	if _, err := dst.Seek(pos+l, io.SeekStart); err != nil {
		return 0, err
	}
	return l, nil
}

// CanClone reports whether the filesystem under dir shares ranges by
// reflink (nil) or why not: it clones one block between two scratch files.
func CanClone(dir string) error {
	a, err := os.CreateTemp(dir, ".nova-clone-*")
	if err != nil {
		return err
	}
	defer os.Remove(a.Name()) //nolint:errcheck // a scratch probe file: what remains on failure changes no answer
	defer a.Close()           //nolint:errcheck // as above
	b, err := os.CreateTemp(dir, ".nova-clone-*")
	if err != nil {
		return err
	}
	defer os.Remove(b.Name()) //nolint:errcheck // a scratch probe file: what remains on failure changes no answer
	defer b.Close()           //nolint:errcheck // as above
	if _, err := a.Write(make([]byte, cloneBlock)); err != nil {
		return err
	}
	if err := a.Sync(); err != nil {
		return err
	}
	return unix.IoctlFileCloneRange(int(b.Fd()), &unix.FileCloneRange{Src_fd: int64(a.Fd()), Src_length: cloneBlock})
}

// BucketRules answers "unknown" for lifecycle rules and default
// encryption, which a directory does not have, and "none" for versioning
// and Object Lock: a deleted file is gone.
func (s *Store) BucketRules(_ context.Context, bucket string) (objstore.BucketRules, error) {
	return objstore.UnversionedRules(bucket, "the file backend has no lifecycle rules or encryption"), nil
}
