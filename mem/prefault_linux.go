package mem

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noPopulate is set when the kernel has no MADV_POPULATE_* (before 5.14),
// found by a probe on the first prefault, and by tests to take the mlock
// path.
var (
	noPopulate atomic.Bool
	probeOnce  sync.Once
)

// probePopulate finds whether madvise knows MADV_POPULATE_WRITE, on a page
// of its own: an EINVAL on a caller's range may come from the range (I/O
// or PFN mappings), not from the kernel's age.
func probePopulate() {
	m, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return
	}
	defer unix.Munmap(m)
	if err := unix.Madvise(m, unix.MADV_POPULATE_WRITE); errors.Is(err, unix.EINVAL) {
		noPopulate.Store(true)
	}
}

// pageSpan widens b to whole pages: madvise and mlock take page-aligned
// ranges. The bytes it adds belong to the same pages, which a prefault
// leaves unchanged.
func pageSpan(b []byte) (start, n uintptr) {
	ps := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start = p &^ (ps - 1)
	end := (p + uintptr(len(b)) + ps - 1) &^ (ps - 1)
	return start, end - start
}

func prefault(b []byte, write bool) error {
	defer runtime.KeepAlive(b)
	start, n := pageSpan(b)
	probeOnce.Do(probePopulate)
	if noPopulate.Load() {
		return prefaultLocked(start, n)
	}
	adv := unix.MADV_POPULATE_READ
	if write {
		adv = unix.MADV_POPULATE_WRITE
	}
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, n, uintptr(adv)); e != 0 {
		return fmt.Errorf("mem: prefault of %d bytes: madvise: %w", len(b), e)
	}
	return nil
}

// prefaultLocked populates [start, start+n) by locking it piece by piece
// (mlock faults a private writable mapping in for writing, anything else
// for reading) and unlocking each piece at once: the pages stay.
func prefaultLocked(start, n uintptr) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return fmt.Errorf("mem: prefault: getrlimit: %w", err)
	}
	ps := uintptr(os.Getpagesize())
	chunk := uintptr(64 << 20)
	if lim.Cur != unix.RLIM_INFINITY && uintptr(lim.Cur) < chunk {
		chunk = uintptr(lim.Cur) &^ (ps - 1)
	}
	if chunk == 0 {
		return errors.New("mem: prefault: madvise(MADV_POPULATE_*) is not supported and RLIMIT_MEMLOCK is below a page")
	}
	for off := uintptr(0); off < n; off += chunk {
		c := min(chunk, n-off)
		if _, _, e := unix.Syscall(unix.SYS_MLOCK, start+off, c, 0); e != 0 {
			return fmt.Errorf("mem: prefault: mlock of %d bytes: %w", c, e)
		}
		_, _, _ = unix.Syscall(unix.SYS_MUNLOCK, start+off, c, 0)
	}
	return nil
}
