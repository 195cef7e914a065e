//go:build !linux

package mem

func prefault(b []byte, write bool) error { return ErrNotSupported }
