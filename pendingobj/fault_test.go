package pendingobj

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var (
	errInjected = errors.New("injected fault")
	errCrashed  = errors.New("process crashed")
)

// faultFS is the real filesystem with a step counter. Every operation is one
// numbered step and is logged. At step failAt it either fails that one
// operation (crash false: the store sees an error and runs its cleanup) or
// simulates the process dying (crash true): that step and every later one
// fail, a write at the crash step lands half its bytes, and nothing the
// store does afterwards reaches the disk.
//
// It also records what a power loss could still undo: files with unsynced
// writes and directory changes since the last directory sync. powerLoss
// applies such a loss, Pebble style.
type faultFS struct {
	osFS
	failAt int
	crash  bool
	before func(op, name string) // runs before each operation executes

	n       int
	crashed bool
	log     []string

	unsynced map[string]bool // name -> has writes not yet synced
	dirOps   []dirOp         // directory changes not yet synced
}

type dirOp struct {
	kind  string // "create", "link" or "unlink"
	name  string
	saved []byte // the unlinked file's bytes, to undo an unlink
}

// step numbers one operation; it returns whether this is the step the
// process dies at, and the error to fail the operation with.
func (f *faultFS) step(op, name string) (dies bool, err error) {
	f.n++
	f.log = append(f.log, op+" "+filepath.Base(name))
	if f.crashed {
		return false, errCrashed
	}
	if f.before != nil {
		f.before(op, name)
	}
	if f.n == f.failAt {
		if f.crash {
			f.crashed = true
			return true, errCrashed
		}
		return false, &fs.PathError{Op: op, Path: name, Err: errInjected}
	}
	return false, nil
}

func (f *faultFS) mark(name string, dirty bool) {
	if f.unsynced == nil {
		f.unsynced = map[string]bool{}
	}
	f.unsynced[name] = dirty
}

func (f *faultFS) openFile(name string, flag int, perm fs.FileMode) (file, error) {
	op := "open"
	if flag&os.O_CREATE != 0 {
		op = "create"
	}
	if _, err := f.step(op, name); err != nil {
		return nil, err
	}
	inner, err := f.osFS.openFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if op == "create" {
		f.dirOps = append(f.dirOps, dirOp{kind: "create", name: name})
		f.mark(name, false)
	}
	return &faultFile{file: inner, fs: f, name: name}, nil
}

func (f *faultFS) lstat(name string) (fs.FileInfo, error) {
	if _, err := f.step("lstat", name); err != nil {
		return nil, err
	}
	return f.osFS.lstat(name)
}

func (f *faultFS) link(oldname, newname string) error {
	if _, err := f.step("link", newname); err != nil {
		return err
	}
	if err := f.osFS.link(oldname, newname); err != nil {
		return err
	}
	f.dirOps = append(f.dirOps, dirOp{kind: "link", name: newname})
	f.mark(newname, f.unsynced[oldname])
	return nil
}

func (f *faultFS) remove(name string) error {
	if _, err := f.step("unlink", name); err != nil {
		return err
	}
	saved, _ := os.ReadFile(name)
	if err := f.osFS.remove(name); err != nil {
		return err
	}
	f.dirOps = append(f.dirOps, dirOp{kind: "unlink", name: name, saved: saved})
	delete(f.unsynced, name)
	return nil
}

func (f *faultFS) readDir(name string) ([]fs.DirEntry, error) {
	if _, err := f.step("readdir", name); err != nil {
		return nil, err
	}
	return f.osFS.readDir(name)
}

func (f *faultFS) syncDir(name string) error {
	if _, err := f.step("syncdir", name); err != nil {
		return err
	}
	if err := f.osFS.syncDir(name); err != nil {
		return err
	}
	f.dirOps = nil
	return nil
}

// possibleLoss reports whether a power loss can undo exactly the directory
// changes whose bits are set in undo (bit i for dirOps[i]). Changes to
// different names may be lost independently (more outcomes than a journaling
// filesystem allows), but changes to one name stay ordered: if one is lost,
// so are the later ones to that name.
func (f *faultFS) possibleLoss(undo uint) bool {
	for i, op := range f.dirOps {
		if undo&(1<<i) == 0 {
			continue
		}
		for j := i + 1; j < len(f.dirOps); j++ {
			if f.dirOps[j].name == op.name && undo&(1<<j) == 0 {
				return false
			}
		}
	}
	return true
}

// powerLoss undoes what the disk had not been told to keep: with torn, every
// file with unsynced writes loses the second half of its bytes; every
// directory change whose bit is set in undo is reverted, newest first.
func (f *faultFS) powerLoss(t testing.TB, undo uint, torn bool) {
	t.Helper()
	if !f.possibleLoss(undo) {
		t.Fatalf("impossible power loss %b of %v", undo, f.dirOps)
	}
	if torn {
		for name, dirty := range f.unsynced {
			if fi, err := os.Stat(name); dirty && err == nil {
				if err := os.Truncate(name, fi.Size()/2); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i := len(f.dirOps) - 1; i >= 0; i-- {
		if undo&(1<<i) == 0 {
			continue
		}
		switch op := f.dirOps[i]; op.kind {
		case "create", "link":
			if err := os.Remove(op.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		case "unlink":
			if err := os.WriteFile(op.name, op.saved, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type faultFile struct {
	file
	fs   *faultFS
	name string
}

func (f *faultFile) Write(p []byte) (int, error) {
	dies, err := f.fs.step("write", f.name)
	if dies && len(p) > 1 {
		n, _ := f.file.Write(p[:len(p)/2])
		f.fs.mark(f.name, true)
		return n, err
	}
	if err != nil {
		return 0, err
	}
	f.fs.mark(f.name, true)
	return f.file.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if _, err := f.fs.step("writeat", f.name); err != nil {
		return 0, err
	}
	f.fs.mark(f.name, true)
	return f.file.WriteAt(p, off)
}

func (f *faultFile) Read(p []byte) (int, error) {
	if _, err := f.fs.step("read", f.name); err != nil {
		return 0, err
	}
	return f.file.Read(p)
}

func (f *faultFile) Stat() (fs.FileInfo, error) {
	if _, err := f.fs.step("stat", f.name); err != nil {
		return nil, err
	}
	return f.file.Stat()
}

func (f *faultFile) Sync() error {
	if _, err := f.fs.step("sync", f.name); err != nil {
		return err
	}
	if err := f.file.Sync(); err != nil {
		return err
	}
	f.fs.mark(f.name, false)
	return nil
}

// Close always releases the descriptor, as the kernel would for a dead
// process, and then reports the step's fault.
func (f *faultFile) Close() error {
	_, err := f.fs.step("close", f.name)
	cerr := f.file.Close()
	if err != nil {
		return err
	}
	return cerr
}

// Helpers shared by the tests.

func newTestStore(t testing.TB, fsys fileSystem) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	if fsys == nil {
		fsys = osFS{}
	}
	s, err := newStore(dir, "ns", "fmt/1", fsys)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dirNames lists a directory, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	slices.Sort(names)
	return names
}

func isInvalid(err error) bool {
	return errors.Is(err, ErrInvalidArgument) && errors.Is(err, fs.ErrInvalid)
}
