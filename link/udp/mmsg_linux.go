package udp

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr from <sys/socket.h>: Go's alignment rules pad it
// exactly as C does (64 bytes on 64-bit, 32 on 32-bit platforms).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// mmsg runs recvmmsg or sendmmsg (nr) on fd for the messages h, without
// waiting: flags always include MSG_DONTWAIT, whatever the socket's mode.
//
// Because the call never waits, it is made as a raw system call, outside
// the runtime's system-call bookkeeping. A call through Syscall6 enters
// that bookkeeping, and the first one after the process went idle wakes the
// runtime's monitor thread (a futex), which then polls (nanosleep) in case
// the call blocks: on a stream whose receiver goes idle between bursts
// those were a sixth of the receiver's system calls and a fifth of the
// sender's, and their wake-ups' CPU (docs/speed.md, "The raw UDP ceiling
// and raw system calls"). Waiting for a
// socket stays with the netpoller (rawConn.Read and Write). A long sendmmsg
// (a window of packets over loopback, whose receive path runs in the
// sender's call) keeps its processor for that time, as any Go code would.
func mmsg(nr, fd uintptr, h []mmsghdr, flags int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(nr, fd, uintptr(unsafe.Pointer(&h[0])), uintptr(len(h)), uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
	return int(r), e
}

func recvmmsg(fd uintptr, h []mmsghdr) (int, unix.Errno) { return mmsg(unix.SYS_RECVMMSG, fd, h, 0) }

func sendmmsg(fd uintptr, h []mmsghdr) (int, unix.Errno) { return mmsg(unix.SYS_SENDMMSG, fd, h, 0) }

// sockaddr is large enough for both sockaddr_in and sockaddr_in6.
type sockaddr = unix.RawSockaddrInet6

const sizeofSockaddr = unix.SizeofSockaddrInet6

// portOf reads a network-order port field.
func portOf(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// setPort writes a network-order port field.
func setPort(p *uint16, v uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(v>>8), byte(v)
}

// addrPortOf decodes a sockaddr filled in by the kernel. IPv6 scope IDs are
// not turned into zones (that would allocate).
func addrPortOf(sa *sockaddr) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), portOf(&s4.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), portOf(&sa.Port))
}

// putSockaddr encodes ap (already of the socket's family) and returns its length.
func putSockaddr(sa *sockaddr, ap netip.AddrPort, is6 bool, scope uint32) uint32 {
	if !is6 {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*s4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().As4()}
		setPort(&s4.Port, ap.Port())
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16(), Scope_id: scope}
	setPort(&sa.Port, ap.Port())
	return unix.SizeofSockaddrInet6
}

// Control-message space per datagram: IPv6 packet info plus traffic class
// and hop limit, with room to spare.
const oobLen = 128

var cmsgHdrLen = unix.CmsgLen(0)

// putCmsg writes a control-message header at the start of b and returns the
// data area of datalen bytes and the space the message takes.
func putCmsg(b []byte, level, typ int32, datalen int) ([]byte, int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(datalen))
	return b[cmsgHdrLen : cmsgHdrLen+datalen], unix.CmsgSpace(datalen)
}

func putInt32(b []byte, v int32) { *(*int32)(unsafe.Pointer(&b[0])) = v }

// parseCmsgs extracts the local address (IP_PKTINFO / IPV6_PKTINFO), the
// TOS / traffic class and the GRO segment size (UDP_GRO) from received
// control messages, without allocating.
func parseCmsgs(b []byte) (dst netip.Addr, tos uint8, seg int) {
	for len(b) >= cmsgHdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(b) {
			break
		}
		data := b[cmsgHdrLen:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			dst = netip.AddrFrom4(pi.Addr)
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			dst = netip.AddrFrom16(pi.Addr)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 2:
			if len(data) >= 4 {
				seg = int(*(*int32)(unsafe.Pointer(&data[0])))
			} else {
				seg = int(*(*uint16)(unsafe.Pointer(&data[0])))
			}
		}
		adv := unix.CmsgSpace(l - cmsgHdrLen)
		if adv > len(b) {
			break
		}
		b = b[adv:]
	}
	return dst, tos, seg
}
