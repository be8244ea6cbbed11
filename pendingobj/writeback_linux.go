//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package pendingobj

import "syscall"

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE from <linux/fs.h>.
const syncFileRangeWrite = 2

// startWriteback is sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE): start
// writeback of every dirty page, do not wait. On these 64-bit platforms the
// call takes its offsets in single registers. Errors are ignored: the
// following fsync does the real work either way.
func (f osFile) startWriteback() {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, 0, 0, syncFileRangeWrite, 0, 0)
	})
}
