//go:build !(linux && (amd64 || arm64 || riscv64 || loong64))

package pendingobj

// startWriteback is a no-op where sync_file_range is unavailable or takes
// its arguments differently; Sync alone does the flushing.
func (osFile) startWriteback() {}
