//go:build linux

package mem

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

const sysSupported = true

func sliceAt(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }

func mmapAnon(n int, huge bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if huge {
		flags |= unix.MAP_HUGETLB
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		if huge && (errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("%w (mmap MAP_HUGETLB of %d bytes: %v)", ErrNoHugePages, n, err)
		}
		return nil, fmt.Errorf("mem: mmap of %d bytes: %w", n, err)
	}
	return sliceAt(p, n), nil
}

func munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}

func mlock(b []byte) error {
	if err := unix.Mlock(b); err != nil {
		return fmt.Errorf("mem: mlock of %d bytes: %w (raise RLIMIT_MEMLOCK, `ulimit -l`, or run with CAP_IPC_LOCK)", len(b), err)
	}
	return nil
}

func munlock(b []byte) error { return unix.Munlock(b) }

func madviseHuge(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }

// mmapFD maps n bytes of fd at off (page aligned) shared.
func mmapFD(fd int, off int64, n int, write bool) ([]byte, error) {
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	p, err := unix.MmapPtr(fd, off, nil, uintptr(n), prot, unix.MAP_SHARED)
	if err != nil {
		if write && errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("mem: mmap for writing: %w (the fd is not open for writing; register read-only or reopen it O_RDWR)", err)
		}
		return nil, fmt.Errorf("mem: mmap offset %d length %d: %w", off, n, err)
	}
	return sliceAt(p, n), nil
}

// protNoneFixed replaces the pages under b with an inaccessible anonymous
// mapping, so a stray access faults instead of reaching memory.
func protNoneFixed(b []byte) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	return err
}

func memfdCreate(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("mem: memfd_create %q: %w", name, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mem: ftruncate memfd %q to %d: %w", name, size, err)
	}
	return fd, nil
}

func dupFD(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mem: dup fd %d: %w", fd, err)
	}
	return nfd, nil
}

func closeFD(fd int) error { return unix.Close(fd) }

// fdInfo returns the size of fd's file and whether it is a regular file
// (memfds are); sizes of other fds (dma-buf, devices) are not known.
func fdInfo(fd int) (size int64, regular bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, false, fmt.Errorf("mem: fstat fd %d: %w", fd, err)
	}
	return st.Size, st.Mode&unix.S_IFMT == unix.S_IFREG, nil
}

// hugePageSize reads the default huge page size from /proc/meminfo.
func hugePageSize() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 2 << 20
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, "Hugepagesize:"); ok {
			fields := strings.Fields(rest)
			if len(fields) >= 1 {
				if kb, err := strconv.Atoi(fields[0]); err == nil && kb > 0 {
					return kb << 10
				}
			}
		}
	}
	return 2 << 20
}
