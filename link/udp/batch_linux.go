package udp

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BatchConn moves batches of datagrams on a *net.UDPConn with
// recvmmsg/sendmmsg, each message scattered over (or gathered from) up to
// iovPer caller buffers, without allocating: x/net's
// ipv4.PacketConn.ReadBatch does the same but allocates a source address
// per datagram. A message may carry several datagrams: on send with UDP GSO
// (SetGSO), on receive with UDP GRO (GSOSize). Unlike Endpoint it does not
// deal in RoCE packets: it is for plain UDP streams (package pipeline).
// Outside Linux it moves one datagram per system call, without GSO or GRO.
type BatchConn struct {
	rc     syscall.RawConn
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	oob    []byte // batchOOB bytes per message
	iovPer int
	count  int // messages to move in this call
	n      int
	errno  unix.Errno
	sendmm bool
	fn     func(fd uintptr) bool
}

// batchOOB is the control-message space of one BatchConn message: one
// UDP_SEGMENT or UDP_GRO value.
var batchOOB = unix.CmsgSpace(4)

// NewBatchConn returns a BatchConn on c for up to batch messages of up to
// iovPer buffers each.
func NewBatchConn(c *net.UDPConn, batch, iovPer int) (*BatchConn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := &BatchConn{rc: rc, hdrs: make([]mmsghdr, batch), iovs: make([]unix.Iovec, batch*iovPer),
		oob: make([]byte, batch*batchOOB), iovPer: iovPer}
	for i := range b.hdrs {
		b.hdrs[i].hdr.Iov = &b.iovs[i*iovPer]
	}
	b.fn = b.do
	return b, nil
}

// Add sets buffer k of message i to x (if x is not empty) without touching
// the others; finish the message with SetLen.
func (b *BatchConn) Add(i, k int, x []byte) {
	if len(x) == 0 {
		return
	}
	v := &b.iovs[i*b.iovPer+k]
	v.Base = &x[0]
	v.SetLen(len(x))
}

// SetLen sets the number of buffers of message i.
func (b *BatchConn) SetLen(i, n int) { b.hdrs[i].hdr.SetIovlen(n) }

// SetGSO makes message i a UDP GSO send of datagrams of size bytes (0: an
// ordinary datagram).
func (b *BatchConn) SetGSO(i, size int) {
	h := &b.hdrs[i].hdr
	if size == 0 {
		h.Control, h.Controllen = nil, 0
		return
	}
	d, sp := putCmsg(b.oob[i*batchOOB:(i+1)*batchOOB], unix.SOL_UDP, unix.UDP_SEGMENT, 2)
	*(*uint16)(unsafe.Pointer(&d[0])) = uint16(size)
	h.Control = &b.oob[i*batchOOB]
	h.SetControllen(sp)
}

// GSOSize returns the datagram size of a GRO receive of message i, or 0 if
// it holds one datagram.
func (b *BatchConn) GSOSize(i int) int {
	l := int(b.hdrs[i].hdr.Controllen)
	if l < cmsgHdrLen {
		return 0
	}
	_, _, seg := parseCmsgs(b.oob[i*batchOOB : i*batchOOB+min(l, batchOOB)])
	return seg
}

// Len returns how many bytes message i moved.
func (b *BatchConn) Len(i int) int { return int(b.hdrs[i].n) }

func (b *BatchConn) do(fd uintptr) bool {
	nr := uintptr(unix.SYS_RECVMMSG)
	if b.sendmm {
		nr = unix.SYS_SENDMMSG
	}
	n, e := mmsg(nr, fd, b.hdrs[:b.count], unix.MSG_DONTWAIT)
	for e == unix.EINTR { // not a wait: try again at once
		n, e = mmsg(nr, fd, b.hdrs[:b.count], unix.MSG_DONTWAIT)
	}
	if e == unix.EAGAIN {
		return false
	}
	b.n, b.errno = n, e
	return true
}

// Recv receives up to count messages (at least one, waiting for it, bounded
// by the connection's read deadline); gro asks for the GRO segment size of
// each (see GSOSize).
func (b *BatchConn) Recv(count int, gro bool) (int, error) {
	b.count, b.sendmm = count, false
	for i := 0; i < count; i++ {
		h := &b.hdrs[i]
		h.n = 0
		if gro {
			h.hdr.Control = &b.oob[i*batchOOB]
			h.hdr.SetControllen(batchOOB)
		}
	}
	if err := b.rc.Read(b.fn); err != nil {
		return 0, err
	}
	if b.errno != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", b.errno)
	}
	return b.n, nil
}

// Send sends count messages, waiting while the socket buffer is full. A
// datagram refused because nobody listens (ECONNREFUSED) is lost, as on a
// wire.
func (b *BatchConn) Send(count int) error {
	for done := 0; done < count; {
		b.count, b.sendmm = count-done, true
		saved := b.hdrs
		b.hdrs = b.hdrs[done:]
		err := b.rc.Write(b.fn)
		b.hdrs = saved
		if err != nil {
			return err
		}
		if b.errno != 0 {
			if errors.Is(b.errno, syscall.ECONNREFUSED) {
				done++
				continue
			}
			return fmt.Errorf("sendmmsg: %w", b.errno)
		}
		done += b.n
	}
	return nil
}

// EnableGRO turns UDP GRO on for c; false if the kernel refuses.
func EnableGRO(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	return err == nil && enableGRO(rc)
}

// GSOSupported reports whether the kernel accepts UDP_SEGMENT on c.
func GSOSupported(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	return err == nil && gsoSupported(rc)
}

// enableGRO turns UDP GRO on for the socket rc; false if the kernel refuses.
func enableGRO(rc syscall.RawConn) bool {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil {
		return false
	}
	return serr == nil
}

// gsoSupported reports whether the kernel knows UDP_SEGMENT on the socket rc.
func gsoSupported(rc syscall.RawConn) bool {
	var gerr error
	if err := rc.Control(func(fd uintptr) { _, gerr = unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT) }); err != nil {
		return false
	}
	return gerr == nil
}

// GSOFailed reports whether a send error means GSO is not usable (the
// kernel or the route refuses it): send datagram by datagram instead.
func GSOFailed(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EOPNOTSUPP)
}
