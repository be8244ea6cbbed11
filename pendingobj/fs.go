package pendingobj

import (
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/nova/auditor/fsync"
)

// fileSystem is every filesystem operation the store performs. Production
// uses osFS; tests inject failures and simulated crashes at any step through
// newStore. It is unexported on purpose: it is a test seam, not an extension
// point.
type fileSystem interface {
	openFile(name string, flag int, perm fs.FileMode) (file, error)
	lstat(name string) (fs.FileInfo, error)
	// link creates newname as a hard link to oldname and fails with an
	// error matching fs.ErrExist if newname exists.
	link(oldname, newname string) error
	// remove unlinks a non-directory name; it never removes a directory.
	remove(name string) error
	readDir(name string) ([]fs.DirEntry, error)
	// syncDir makes the directory's entries durable.
	syncDir(name string) error
}

type file interface {
	io.ReadWriteCloser
	io.WriterAt
	Stat() (fs.FileInfo, error)
	Sync() error
	// startWriteback asks the kernel to start writing the file's dirty
	// pages to disk without waiting. It is a hint with no durability
	// meaning (Sync still does all of that) and cannot fail.
	startWriteback()
}

type osFS struct{}

// osFile is an *os.File with the platform's startWriteback.
type osFile struct{ *os.File }

func (osFS) openFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // a nil *os.File must not become a non-nil file
	}
	return osFile{f}, nil
}

func (osFS) lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

func (osFS) link(oldname, newname string) error { return os.Link(oldname, newname) }

// remove uses unlink rather than os.Remove, which falls back to rmdir: a
// directory that happens to carry one of the store's names is not the store's
// to delete.
func (osFS) remove(name string) error {
	if err := syscall.Unlink(name); err != nil {
		return &fs.PathError{Op: "unlink", Path: name, Err: err}
	}
	return nil
}

func (osFS) readDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

func (osFS) syncDir(name string) error { return fsync.Dir(name) }
