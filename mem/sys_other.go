//go:build !linux

package mem

const sysSupported = false

func mmapAnon(n int, huge bool) ([]byte, error)               { return nil, ErrNotSupported }
func munmap(b []byte) error                                   { return ErrNotSupported }
func mlock(b []byte) error                                    { return ErrNotSupported }
func munlock(b []byte) error                                  { return ErrNotSupported }
func madviseHuge(b []byte)                                    {}
func mmapFD(fd int, off int64, n int, w bool) ([]byte, error) { return nil, ErrNotSupported }
func protNoneFixed(b []byte) error                            { return ErrNotSupported }
func memfdCreate(name string, size int64) (int, error)        { return -1, ErrNotSupported }
func dupFD(fd int) (int, error)                               { return -1, ErrNotSupported }
func closeFD(fd int) error                                    { return ErrNotSupported }
func fdInfo(fd int) (int64, bool, error)                      { return 0, false, ErrNotSupported }
func hugePageSize() int                                       { return 2 << 20 }
