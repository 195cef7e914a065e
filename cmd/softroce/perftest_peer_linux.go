package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// peerClosed peeks at the socket: end of file or a reset means the peer is gone.
func peerClosed(rc syscall.RawConn) bool {
	closed := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == unix.ECONNRESET || err == unix.EPIPE
		return true
	})
	return closed
}
