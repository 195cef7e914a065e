//go:build !linux

package pipeline

import "net"

// ListenUDP opens a UDP socket for RecvUDP on addr with a receive buffer of
// rcvbuf bytes (0: 64 MiB; the system may cap it).
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
	c.SetReadBuffer(rcvbuf)
	return c, nil
}
