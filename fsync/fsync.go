// Package fsync makes a directory's entries durable: a file created,
// renamed, linked or unlinked in a directory survives a crash only once the
// directory itself is fsynced. The file-backed object store and the
// pending-object sidecars both rely on it. It is a leaf: it imports nothing
// of ours, so every layer may import it.
package fsync

import "os"

// Dir fsyncs the directory dir. Its errors are the *fs.PathError of the
// open, the sync or the close, naming dir.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
