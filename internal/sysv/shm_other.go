//go:build !linux

package sysv

// ShmGet is not supported on this system.
func ShmGet(key int32, size uint64, flag int) (int, error) { return -1, ErrUnsupported }

// ShmAttach is not supported on this system.
func ShmAttach(id int, addr uintptr, flag int) ([]byte, error) { return nil, ErrUnsupported }

// ShmDetach is not supported on this system.
func ShmDetach(b []byte) error { return ErrUnsupported }

// ShmRemove is not supported on this system.
func ShmRemove(id int) error { return ErrUnsupported }

// ShmSize is not supported on this system.
func ShmSize(id int) (uint64, error) { return 0, ErrUnsupported }

// ShmLockMem is not supported on this system.
func ShmLockMem(id int) error { return ErrUnsupported }
