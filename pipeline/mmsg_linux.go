package pipeline

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// UDP segmentation offload socket options and control messages
// (<linux/udp.h>).
const (
	solUDP     = 17
	udpSegment = 103 // UDP_SEGMENT: send one buffer as datagrams of this size (GSO)
	udpGRO     = 104 // UDP_GRO: receive runs of datagrams as one buffer
)

// batchConn moves batches of datagrams with recvmmsg/sendmmsg, each message
// scattered over (or gathered from) up to iovPer buffers, without
// allocating: x/net's ipv4.PacketConn.ReadBatch does the same but allocates
// a source address per datagram, which this receiver does not need. A
// message may carry several datagrams: on send with UDP GSO (setGSO), on
// receive with UDP GRO (gsoSize).
type batchConn struct {
	rc     syscall.RawConn
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	oob    []byte // cmsgSpace per message
	iovPer int
	count  int // messages to move in this call
	n      int
	errno  syscall.Errno
	sendmm bool
	fn     func(fd uintptr) bool
}

var cmsgSpace = unix.CmsgSpace(4)

func newBatchConn(c *net.UDPConn, batch, iovPer int) (*batchConn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := &batchConn{rc: rc, hdrs: make([]mmsghdr, batch), iovs: make([]unix.Iovec, batch*iovPer),
		oob: make([]byte, batch*cmsgSpace), iovPer: iovPer}
	for i := range b.hdrs {
		b.hdrs[i].hdr.Iov = &b.iovs[i*iovPer]
	}
	b.fn = b.do
	return b, nil
}

// set points message i at bufs (at most iovPer, empty ones skipped).
func (b *batchConn) set(i int, bufs ...[]byte) {
	n := 0
	for _, x := range bufs {
		b.add(i, n, x)
		if len(x) > 0 {
			n++
		}
	}
	b.hdrs[i].hdr.SetIovlen(n)
}

// add sets buffer k of message i (if x is not empty) without touching the
// others; finish with setLen.
func (b *batchConn) add(i, k int, x []byte) {
	if len(x) == 0 {
		return
	}
	v := &b.iovs[i*b.iovPer+k]
	v.Base = &x[0]
	v.SetLen(len(x))
}

// setLen sets the number of buffers of message i.
func (b *batchConn) setLen(i, n int) { b.hdrs[i].hdr.SetIovlen(n) }

// setGSO makes message i a UDP GSO send of datagrams of size bytes (0: an
// ordinary datagram).
func (b *batchConn) setGSO(i, size int) {
	h := &b.hdrs[i].hdr
	if size == 0 {
		h.Control, h.Controllen = nil, 0
		return
	}
	o := b.oob[i*cmsgSpace : (i+1)*cmsgSpace]
	c := (*unix.Cmsghdr)(unsafe.Pointer(&o[0]))
	c.Level, c.Type = solUDP, udpSegment
	c.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&o[unix.CmsgLen(0)])) = uint16(size)
	h.Control = &o[0]
	h.SetControllen(unix.CmsgSpace(2))
}

// gsoSize returns the datagram size of a GRO receive of message i, or 0 if
// it holds one datagram.
func (b *batchConn) gsoSize(i int) int {
	h := &b.hdrs[i].hdr
	if int(h.Controllen) < unix.CmsgLen(0) {
		return 0
	}
	o := b.oob[i*cmsgSpace : (i+1)*cmsgSpace]
	c := (*unix.Cmsghdr)(unsafe.Pointer(&o[0]))
	if c.Level != solUDP || c.Type != udpGRO || int(c.Len) < unix.CmsgLen(2) {
		return 0
	}
	if int(c.Len) >= unix.CmsgLen(4) {
		return int(*(*int32)(unsafe.Pointer(&o[unix.CmsgLen(0)])))
	}
	return int(*(*uint16)(unsafe.Pointer(&o[unix.CmsgLen(0)])))
}

// length returns how many bytes message i moved.
func (b *batchConn) length(i int) int { return int(b.hdrs[i].n) }

func (b *batchConn) do(fd uintptr) bool {
	nr := uintptr(unix.SYS_RECVMMSG)
	if b.sendmm {
		nr = unix.SYS_SENDMMSG
	}
	r, _, e := unix.Syscall6(nr, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.count), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.n, b.errno = int(r), e
	return true
}

// recv receives up to count messages (at least one, waiting for it, bounded
// by the connection's read deadline).
func (b *batchConn) recv(count int, gro bool) (int, error) {
	b.count, b.sendmm = count, false
	for i := 0; i < count; i++ {
		h := &b.hdrs[i]
		h.n = 0
		if gro {
			h.hdr.Control = &b.oob[i*cmsgSpace]
			h.hdr.SetControllen(cmsgSpace)
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

// send sends count messages, waiting while the socket buffer is full.
func (b *batchConn) send(count int) error {
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
				// nobody listening (yet): the datagram is lost, as on a wire
				done++
				continue
			}
			return fmt.Errorf("sendmmsg: %w", b.errno)
		}
		done += b.n
	}
	return nil
}

// enableGRO turns UDP GRO on for c; false if the kernel refuses.
func enableGRO(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), solUDP, udpGRO, 1) }); err != nil {
		return false
	}
	return serr == nil
}

// gsoSupported reports whether the kernel accepts UDP_SEGMENT on c.
func gsoSupported(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), solUDP, udpSegment) }); err != nil {
		return false
	}
	_ = v
	return gerr == nil
}

// gsoFailed reports whether a send error means GSO is not usable.
func gsoFailed(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EOPNOTSUPP)
}
