package pendingobj

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"
)

const (
	// filePerm: sidecars hold user data staged for upload; only the owner
	// (the auditor) reads them.
	filePerm fs.FileMode = 0o600

	// largeObject is the object size from which Install hashes in
	// parallel with writing and writeback (writeLarge); below it one write
	// of a copied buffer costs less than the goroutine and extra calls.
	largeObject = 256 << 10

	// readChunk is how many object bytes are read before they are hashed:
	// big enough to amortise system calls, small enough that the bytes are
	// still in cache when hashed. VerifyAll streams through one such buffer
	// instead of holding the object.
	readChunk = 1 << 20
)

// Object is one decoded sidecar.
type Object struct {
	FileName  string
	MediaType string
	Bytes     []byte
}

// Store manages the sidecars of one namespace in one directory. Its fields
// never change after New; see the package documentation for the concurrency
// boundary.
type Store struct {
	dir       string
	namespace string
	formatID  string
	prefix    string // namespace + "-"
	fsys      fileSystem
}

// New validates the configuration and returns a store. It does not touch the
// filesystem: the directory need not exist yet.
func New(dir, namespace, formatID string) (*Store, error) {
	return newStore(dir, namespace, formatID, osFS{})
}

// newStore is New with an injected filesystem, the seam for fault and crash
// tests.
func newStore(dir, namespace, formatID string, fsys fileSystem) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("pendingobj: %w", invalidf("directory is empty"))
	}
	if !validNamespace(namespace) {
		return nil, fmt.Errorf("pendingobj: %w", invalidf("namespace %s: want 1 to %d ASCII letters, digits, '-' or '_'", quote(namespace), maxNamespaceLen))
	}
	if err := checkFormatID(formatID); err != nil {
		return nil, fmt.Errorf("pendingobj: %w", err)
	}
	return &Store{dir: dir, namespace: namespace, formatID: formatID, prefix: namespace + "-", fsys: fsys}, nil
}

// Path returns the canonical final path of position: it is the only path Read
// opens for it.
func (s *Store) Path(position uint64) string { return s.path(position, false) }

func (s *Store) path(position uint64, temp bool) string {
	return filepath.Join(s.dir, string(appendName(nil, s.namespace, position, temp)))
}

// Install durably stores one object at position. It fails with an error
// matching fs.ErrExist if the final file is already there, fs.ErrNotExist if
// the directory is missing, and ErrInvalidArgument for empty (or
// whitespace-only) or non-UTF-8 metadata.
//
// When Install returns nil the final file is complete and durable. When it
// fails, or the process dies inside it, what remains for position is nothing,
// a temporary file that Reconcile removes, or a complete final file: never a
// partial final file.
func (s *Store) Install(position uint64, fileName, mediaType string, data []byte) error {
	if err := s.install(position, fileName, mediaType, data); err != nil {
		return fmt.Errorf("pendingobj: install position %d: %w", position, err)
	}
	return nil
}

func (s *Store) install(position uint64, fileName, mediaType string, data []byte) error {
	if err := checkMetadata("file name", fileName); err != nil {
		return err
	}
	if err := checkMetadata("media type", mediaType); err != nil {
		return err
	}
	final, temp := s.path(position, false), s.path(position, true)

	// The early check refuses without touching the stale temporary file; the
	// link below is what makes the refusal hold if the final file appears
	// after this check.
	if _, err := s.fsys.lstat(final); err == nil {
		return fmt.Errorf("%s: %w", final, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := s.fsys.remove(temp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale temporary file: %w", err)
	}

	if err := s.writeTemp(temp, encodeHead(s.formatID, fileName, mediaType, uint64(len(data))), data); err != nil {
		return err
	}

	// The spec's "atomically renames it to the final path" is done as
	// link(temp, final) then unlink(temp). link fails with EEXIST instead of
	// replacing, so "refuse to overwrite" holds even against a final file
	// created after the check above (docs/format.md#pending-object-sidecar), and it is as
	// atomic as rename: the final name appears at once, pointing at an inode
	// whose bytes were synced before. A crash between link and unlink leaves
	// the temporary name as a second link to the same complete inode;
	// Reconcile removes it without affecting the final file. The one
	// directory sync below persists both the link and the unlink. The cost:
	// the filesystem must support hard links (ext4, xfs, btrfs, zfs do).
	if err := s.fsys.link(temp, final); err != nil {
		return errors.Join(err, s.discard(temp))
	}
	// From here the final file is complete. A failure below is still an
	// error (durability is not yet confirmed) but leaves it in place.
	var rmErr error
	if err := s.fsys.remove(temp); err != nil {
		rmErr = fmt.Errorf("remove temporary file after link: %w", err)
	}
	return errors.Join(rmErr, s.fsys.syncDir(s.dir))
}

// writeTemp creates temp exclusively, writes head (filling in its digest
// field) and data, syncs and closes it. On failure it removes temp.
func (s *Store) writeTemp(temp string, head, data []byte) error {
	f, err := s.fsys.openFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	if len(data) < largeObject {
		err = writeSmall(f, head, data)
	} else {
		err = writeLarge(f, head, data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, s.discard(temp))
	}
	return nil
}

// writeSmall writes the whole encoding with one write and syncs.
func writeSmall(f file, head, data []byte) error {
	sum := sha256.Sum256(data)
	copy(head[offDigest:], sum[:])
	buf := append(make([]byte, 0, len(head)+len(data)), head...)
	if _, err := f.Write(append(buf, data...)); err != nil {
		return err
	}
	return f.Sync()
}

// writeLarge writes the object from the caller's slice (never copied) while
// a goroutine hashes it, asks the kernel to start writing it back, and only
// then waits for the digest, writes it into its header field and syncs. The
// hash (about 1.6 GB/s with SHA-NI, 10 ms for 16 MiB) thus overlaps the
// write and the device's writeback instead of preceding them; the single
// Sync still makes the complete file durable.
func writeLarge(f file, head, data []byte) error {
	digest := make(chan [sha256.Size]byte, 1)
	go func() { digest <- sha256.Sum256(data) }()
	err := writeAll(f, head, data)
	if err == nil {
		f.startWriteback()
	}
	// Wait even after a failure: the caller's slice must not be read after
	// Install returns.
	sum := <-digest
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(sum[:], offDigest); err != nil {
		return err
	}
	return f.Sync()
}

func writeAll(f file, head, data []byte) error {
	if _, err := f.Write(head); err != nil {
		return err
	}
	_, err := f.Write(data)
	return err
}

// discard removes a temporary file after a failed install.
func (s *Store) discard(temp string) error {
	if err := s.fsys.remove(temp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clean up temporary file: %w", err)
	}
	return nil
}

// Read opens the canonical final path of position (never the temporary one)
// and returns the object after checking every rule of docs/format.md#pending-object-sidecar.
// A missing file matches fs.ErrNotExist; damaged bytes return a *FormatError
// matching ErrCorrupt (ErrChecksum for a digest mismatch) or ErrFormatID.
// The object is held in memory once; the file's declared lengths are checked
// against its real size before anything is allocated.
func (s *Store) Read(position uint64) (Object, error) {
	return s.read(position, true)
}

// read decodes position; with keep false it streams the object through the
// hash without holding it.
func (s *Store) read(position uint64, keep bool) (Object, error) {
	path := s.Path(position)
	f, err := s.fsys.openFile(path, os.O_RDONLY, 0)
	if err != nil {
		return Object{}, fmt.Errorf("pendingobj: read position %d: %w", position, err)
	}
	d := decoder{f: f, path: path, position: position, formatID: s.formatID}
	obj, err := d.decode(keep)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) {
			err = fmt.Errorf("pendingobj: read position %d: %w", position, err)
		}
		return Object{}, err
	}
	return obj, nil
}

type decoder struct {
	f        file
	path     string
	position uint64
	formatID string
}

func (d *decoder) fail(sentinel error, off int64, format string, args ...any) *FormatError {
	return &FormatError{Position: d.position, Path: d.path, Offset: off, What: fmt.Sprintf(format, args...), Err: sentinel}
}

// readFull reads len(b) bytes found at off. The size was checked against
// the declared lengths already, so running out means the file shrank while
// being read.
func (d *decoder) readFull(b []byte, off int64) error {
	_, err := io.ReadFull(d.f, b)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return d.fail(ErrCorrupt, off, "truncated: the file ended within %d bytes from here (it changed while being read)", len(b))
	}
	return err
}

// decode checks, in order: regular file, magic, fixed header present,
// declared total length (overflow, then equal to the real size), format ID,
// metadata UTF-8 and non-emptiness, then the object's SHA-256. Lengths are
// trusted for allocation only after they sum to the file's real size.
func (d *decoder) decode(keep bool) (Object, error) {
	fi, err := d.f.Stat()
	if err != nil {
		return Object{}, err
	}
	if !fi.Mode().IsRegular() {
		return Object{}, d.fail(ErrCorrupt, 0, "not a regular file (mode %v)", fi.Mode())
	}
	size := fi.Size()

	var hb [headerLen]byte
	got := hb[:min(size, headerLen)]
	if err := d.readFull(got, 0); err != nil {
		return Object{}, err
	}
	if n := min(len(got), len(magic)); string(got[:n]) != magic[:n] {
		return Object{}, d.fail(ErrCorrupt, 0, "bad magic %q", got[:n])
	}
	if len(got) < headerLen {
		return Object{}, d.fail(ErrCorrupt, fieldAt(len(got)), "truncated: file is %d bytes, shorter than the %d-byte fixed header", size, headerLen)
	}
	h := parseHeader(&hb)

	metaEnd := headerLen + h.metaLen()
	total, carry := bits.Add64(metaEnd, h.objectLen, 0)
	switch {
	case carry != 0:
		return Object{}, d.fail(ErrCorrupt, int64(offObjectLen), "length overflow: %d header and metadata bytes plus a %d-byte object exceed 2^64-1", metaEnd, h.objectLen)
	case total > uint64(size):
		return Object{}, d.fail(ErrCorrupt, int64(offFormatIDLen), "truncated: header declares %d bytes, file has %d", total, size)
	case total < uint64(size):
		return Object{}, d.fail(ErrCorrupt, int64(offFormatIDLen), "trailing bytes: header declares %d bytes, file has %d", total, size)
	}
	// total == size bounds every allocation below by the real file size.
	if keep && (h.metaLen() > math.MaxInt || h.objectLen > math.MaxInt) {
		return Object{}, fmt.Errorf("%s: a %d-byte object does not fit in memory", d.path, h.objectLen)
	}

	meta := make([]byte, h.metaLen())
	if err := d.readFull(meta, headerLen); err != nil {
		return Object{}, err
	}
	fid, rest := meta[:h.formatIDLen], meta[h.formatIDLen:]
	name, media := rest[:h.fileNameLen], rest[h.fileNameLen:]
	offName := int64(headerLen) + int64(h.formatIDLen)
	offMedia := offName + int64(h.fileNameLen)

	if string(fid) != d.formatID {
		off := int64(headerLen)
		if len(fid) != len(d.formatID) {
			off = int64(offFormatIDLen)
		}
		return Object{}, d.fail(ErrFormatID, off, "format ID %s, store expects %s", quote(string(fid)), quote(d.formatID))
	}
	for _, m := range [...]struct {
		field string
		b     []byte
		off   int64
	}{{"file name", name, offName}, {"media type", media, offMedia}} {
		if !utf8.Valid(m.b) {
			return Object{}, d.fail(ErrCorrupt, m.off, "%s is not valid UTF-8", m.field)
		}
		if blank(string(m.b)) {
			return Object{}, d.fail(ErrCorrupt, m.off, "%s is empty", m.field)
		}
	}
	obj := Object{FileName: string(name), MediaType: string(media)}

	offObject := int64(metaEnd)
	sum := sha256.New()
	if keep {
		obj.Bytes = make([]byte, h.objectLen)
		for off := 0; off < len(obj.Bytes); off += readChunk {
			chunk := obj.Bytes[off:min(off+readChunk, len(obj.Bytes))]
			if err := d.readFull(chunk, offObject+int64(off)); err != nil {
				return Object{}, err
			}
			sum.Write(chunk)
		}
	} else {
		buf := make([]byte, min(h.objectLen, readChunk))
		for off := uint64(0); off < h.objectLen; {
			chunk := buf[:min(h.objectLen-off, uint64(len(buf)))]
			if err := d.readFull(chunk, offObject+int64(off)); err != nil {
				return Object{}, err
			}
			sum.Write(chunk)
			off += uint64(len(chunk))
		}
	}
	var one [1]byte
	if n, err := d.f.Read(one[:]); n > 0 {
		return Object{}, d.fail(ErrCorrupt, int64(total), "trailing bytes: the file grew past its declared %d bytes while being read", total)
	} else if err != nil && err != io.EOF {
		return Object{}, err
	}
	var digest [sha256.Size]byte
	if sum.Sum(digest[:0]); digest != h.digest {
		return Object{}, d.fail(ErrChecksum, int64(offDigest), "object SHA-256 is %x, header records %x", digest, h.digest)
	}
	return obj, nil
}

// VerifyAll reads every position, streaming each object through its hash,
// and removes nothing. Each failure names its position; several are joined.
func (s *Store) VerifyAll(positions []uint64) error {
	var errs []error
	seen := make(map[uint64]struct{}, len(positions))
	for _, p := range positions {
		if _, dup := seen[p]; dup {
			continue
		}
		seen[p] = struct{}{}
		if _, err := s.read(p, false); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("pendingobj: verify: %d of %d positions failed: %w", len(errs), len(seen), errors.Join(errs...))
}

type entry struct {
	position uint64
	temp     bool
	name     string
}

// list returns the store's recognised files; everything else in the
// directory is not the store's and is never touched.
func (s *Store) list() ([]entry, error) {
	des, err := s.fsys.readDir(s.dir)
	if err != nil {
		return nil, err
	}
	var es []entry
	for _, de := range des {
		if p, temp, ok := parseName(s.prefix, de.Name()); ok {
			es = append(es, entry{position: p, temp: temp, name: de.Name()})
		}
	}
	return es, nil
}

// Positions returns the positions of the recognised final files, sorted.
// A missing directory has none.
func (s *Store) Positions() ([]uint64, error) {
	es, err := s.list()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("pendingobj: list positions: %w", err)
	}
	var ps []uint64
	for _, e := range es {
		if !e.temp {
			ps = append(ps, e.position)
		}
	}
	slices.Sort(ps)
	return ps, nil
}

// Reconcile removes every recognised temporary file and every recognised
// final file whose position is not referenced, syncs the directory if it
// removed anything, then verifies every referenced position. A missing
// directory holds nothing to remove (the referenced positions then fail
// verification as not found). It keeps going after a failure and joins all
// errors, each naming its position.
func (s *Store) Reconcile(referenced []uint64) error {
	keep := make(map[uint64]struct{}, len(referenced))
	for _, p := range referenced {
		keep[p] = struct{}{}
	}
	es, err := s.list()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pendingobj: reconcile: %w", err)
	}
	var errs []error
	removed := false
	for _, e := range es {
		if _, ok := keep[e.position]; ok && !e.temp {
			continue
		}
		switch err := s.fsys.remove(filepath.Join(s.dir, e.name)); {
		case err == nil:
			removed = true
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("pendingobj: reconcile: remove position %d: %w", e.position, err))
		}
	}
	if removed {
		if err := s.fsys.syncDir(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("pendingobj: reconcile: sync directory: %w", err))
		}
	}
	if err := s.VerifyAll(referenced); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DeleteAll removes every recognised temporary and final file of the
// namespace, leaves other names alone, and syncs the directory before it
// returns nil. The directory must exist.
func (s *Store) DeleteAll() error {
	es, err := s.list()
	if err != nil {
		return fmt.Errorf("pendingobj: delete all: %w", err)
	}
	var errs []error
	for _, e := range es {
		if err := s.fsys.remove(filepath.Join(s.dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("pendingobj: delete all: remove position %d: %w", e.position, err))
		}
	}
	if err := s.fsys.syncDir(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("pendingobj: delete all: sync directory: %w", err))
	}
	return errors.Join(errs...)
}

// quote renders a possibly huge or binary string for an error message.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q... (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// Remove deletes the final file at position (absence is success) and syncs
// the directory, so a superseded object can be installed there again.
func (s *Store) Remove(position uint64) error {
	if err := s.fsys.remove(s.path(position, false)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("pendingobj: remove position %d: %w", position, err)
	}
	if err := s.fsys.syncDir(s.dir); err != nil {
		return fmt.Errorf("pendingobj: remove position %d: sync directory: %w", position, err)
	}
	return nil
}
