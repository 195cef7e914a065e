//go:build !linux

package perftest

import "errors"

// mmapSupported: --mmap is implemented with Linux's mmap only.
const mmapSupported = false

func mmap(string, int, int) ([]byte, error) {
	return nil, errors.New("--mmap is implemented on Linux only")
}

func munmap([]byte) error { return nil }
