//go:build !linux

package perftest

import "errors"

// ptMmapSupported: --mmap is implemented with Linux's mmap only.
const ptMmapSupported = false

func ptMmap(string, int, int) ([]byte, error) {
	return nil, errors.New("--mmap is implemented on Linux only")
}

func ptMunmap([]byte) error { return nil }
