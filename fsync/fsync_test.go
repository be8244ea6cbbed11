package fsync_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nova/auditor/fsync"
)

func TestDir(t *testing.T) {
	dir := t.TempDir()
	if err := fsync.Dir(dir); err != nil {
		t.Fatalf("fsync of an existing directory: %v", err)
	}
	missing := filepath.Join(dir, "gone")
	err := fsync.Dir(missing)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fsync of a missing directory: %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("the error %q does not name the directory", err)
	}
}
