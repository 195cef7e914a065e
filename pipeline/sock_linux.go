package pipeline

import (
	"net"

	"golang.org/x/sys/unix"
)

// ListenUDP opens a UDP socket for RecvUDP on addr with a receive buffer of
// rcvbuf bytes (0: 256 MiB). It uses SO_RCVBUFFORCE when allowed (root or
// CAP_NET_ADMIN), so the size is not capped by net.core.rmem_max: a
// digitiser stream bursts faster than a reader drains it.
func ListenUDP(addr string, rcvbuf int) (*net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	if rcvbuf <= 0 {
		rcvbuf = 256 << 20
	}
	if rc, err := c.SyscallConn(); err == nil {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) })
		if serr == nil {
			return c, nil
		}
	}
	c.SetReadBuffer(rcvbuf)
	return c, nil
}
