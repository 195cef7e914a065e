//go:build linux

package sysv

import "golang.org/x/sys/unix"

// The shared memory calls are in golang.org/x/sys/unix on every Linux
// architecture, 32-bit ones too (package mem's Shm provider uses them
// there); the semaphores and the PSRDADA layout are 64-bit only.

// ShmGet returns the id of the shared memory segment with key, creating it
// with size bytes when flag has IPCCreat (shmget).
func ShmGet(key int32, size uint64, flag int) (int, error) {
	if size > uint64(^uint(0)>>1) {
		return -1, unix.EINVAL
	}
	return unix.SysvShmGet(int(key), int(size), flag)
}

// ShmAttach attaches segment id at addr (0: the kernel chooses) and returns
// a slice over its requested size.
func ShmAttach(id int, addr uintptr, flag int) ([]byte, error) {
	return unix.SysvShmAttach(id, addr, flag)
}

// ShmDetach detaches a segment attached with ShmAttach.
func ShmDetach(b []byte) error { return unix.SysvShmDetach(b) }

// ShmRemove marks segment id for removal (IPC_RMID); it disappears when the
// last process detaches.
func ShmRemove(id int) error {
	_, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	return err
}

// ShmSize returns the size in bytes segment id was created with.
func ShmSize(id int) (uint64, error) {
	var d unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &d); err != nil {
		return 0, err
	}
	return uint64(d.Segsz), nil
}

// ShmLockMem locks segment id in memory (SHM_LOCK); it needs CAP_IPC_LOCK or
// a large enough RLIMIT_MEMLOCK.
func ShmLockMem(id int) error {
	_, err := unix.SysvShmCtl(id, ShmLock, nil)
	return err
}
