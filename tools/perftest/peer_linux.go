package perftest

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// peerClosed reports whether the peer closed its end: the socket is in
// CLOSE_WAIT (its FIN arrived, even behind data not read yet) or CLOSE (a
// reset), as TCP_INFO tells; without TCP_INFO a peek for end of file.
func peerClosed(rc syscall.RawConn) bool {
	closed := false
	rc.Control(func(fd uintptr) {
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			closed = ti.State == unix.BPF_TCP_CLOSE_WAIT || ti.State == unix.BPF_TCP_CLOSE
			return
		}
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == unix.ECONNRESET
	})
	return closed
}
