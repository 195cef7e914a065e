//go:build linux

package perftest

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mmapSupported: --mmap maps the file with mmap(2).
const mmapSupported = true

// mmap is perftest's pp_init_mmap: n bytes of the file name from offset
// off, mapped shared and read/write, so that what the test's buffers
// hold is the file's. The file must hold the n bytes: a mapping past its
// end would fault on the first access.
func mmap(name string, off, n int) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, &mmapError{line: fmt.Sprintf("Unable to open '%s': %s", name, strerror(err)),
			why: "--mmap needs an existing file this user may read and write"}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &mmapError{line: fmt.Sprintf("Unable to open '%s': %s", name, strerror(err))}
	}
	if end := int64(off) + int64(n); st.Mode().IsRegular() && end > st.Size() {
		return nil, &mmapError{why: fmt.Sprintf("--mmap file %s has %d bytes, and the test's buffers need %d from offset %d: make it at least %d bytes (truncate -s %d %s)",
			name, st.Size(), n, off, end, end, name)}
	}
	b, err := unix.Mmap(int(f.Fd()), int64(off), n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		e := &mmapError{line: fmt.Sprintf("Unable to mmap '%s': %s", name, strerror(err))}
		if off%os.Getpagesize() != 0 {
			e.why = fmt.Sprintf("--mmap-offset must be a multiple of the page size, %d", os.Getpagesize())
		}
		return nil, e
	}
	return b, nil
}

// munmap unmaps what mmap mapped.
func munmap(b []byte) error { return unix.Munmap(b) }
