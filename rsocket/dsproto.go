package rsocket

import (
	"encoding/binary"
	"net/netip"
	"syscall"
)

// The datagram rsocket protocol (rsocket.c's ds_* functions). A datagram
// rsocket is a UD QP per local address, plus a real UDP socket bound to
// the rsocket's address. A datagram to a destination whose QP is not known
// yet goes over UDP, behind a DSUDPHeader naming the sender's QP (OpData);
// the receiver answers with a DSUDPHeader alone (OpCtrl) naming its own
// QP, and each side makes an address handle for the other. From then on,
// datagrams are UD SENDs (Q_Key RDMA_UDP_QKEY) that start with a DSHeader
// giving the sender's socket address, which recvfrom reports.

// Datagram protocol constants (rsocket.c).
const (
	DSUDPTag        = 0x55555555 // DS_UDP_TAG
	DSHeaderLen4    = 8          // DS_IPV4_HDR_LEN
	DSHeaderLen6    = 24         // DS_IPV6_HDR_LEN
	DSUDPHeaderLen4 = 16         // DS_UDP_IPV4_HDR_LEN
	DSUDPHeaderLen6 = 28         // DS_UDP_IPV6_HDR_LEN
	UDPQKey         = 0x01234567 // RDMA_UDP_QKEY
	grhLen          = 40         // sizeof(struct ibv_grh)
	// MaxDatagram is the largest datagram a datagram rsocket carries:
	// a receive slot (RS_SNDLOWAT) less an IPv4 DSHeader.
	MaxDatagram = sndLowat - DSHeaderLen4
)

// DSHeader is struct ds_header: the sender's socket address, in front of
// every datagram sent over a UD QP.
type DSHeader struct {
	Addr     netip.AddrPort
	FlowInfo uint32 // IPv6 only
}

// Len returns the header's length on the wire (8 for IPv4, 24 for IPv6).
func (h *DSHeader) Len() int {
	if h.Addr.Addr().Is4() {
		return DSHeaderLen4
	}
	return DSHeaderLen6
}

// Marshal writes the header into b (at least Len bytes) and returns its
// length.
func (h *DSHeader) Marshal(b []byte) int {
	a := h.Addr.Addr()
	if a.Is4() {
		b[0], b[1] = 4, DSHeaderLen4
		binary.BigEndian.PutUint16(b[2:], h.Addr.Port())
		v := a.As4()
		copy(b[4:8], v[:])
		return DSHeaderLen4
	}
	b[0], b[1] = 6, DSHeaderLen6
	binary.BigEndian.PutUint16(b[2:], h.Addr.Port())
	binary.BigEndian.PutUint32(b[4:], h.FlowInfo)
	v := a.As16()
	copy(b[8:24], v[:])
	return DSHeaderLen6
}

var errDSHeader = &Error{Op: "recv", Reason: "bad datagram header", Errno: syscall.EPROTO}

// ParseDSHeader reads a DSHeader (ds_valid_recv's checks: version 4 with
// length 8, or 6 with 24) and returns it with its length.
func ParseDSHeader(b []byte) (DSHeader, int, error) {
	if len(b) < DSHeaderLen4 {
		return DSHeader{}, 0, errDSHeader
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch {
	case b[0] == 4 && b[1] == DSHeaderLen4:
		return DSHeader{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)}, DSHeaderLen4, nil
	case b[0] == 6 && b[1] == DSHeaderLen6 && len(b) >= DSHeaderLen6:
		return DSHeader{Addr: netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port),
			FlowInfo: binary.BigEndian.Uint32(b[4:])}, DSHeaderLen6, nil
	}
	return DSHeader{}, 0, errDSHeader
}

// DSUDPHeader is struct ds_udp_header: the header of a datagram sent over
// the UDP socket, naming the sender's UD QP and its address.
type DSUDPHeader struct {
	Op   uint8 // OpData (a datagram follows) or OpCtrl (the reply: just this header)
	QPN  uint32
	Addr netip.Addr // the address of the sender's QP (IPv4 or IPv6)
}

// Len returns the header's length on the wire (16 for IPv4, 28 for IPv6).
func (h *DSUDPHeader) Len() int {
	if h.Addr.Is4() {
		return DSUDPHeaderLen4
	}
	return DSUDPHeaderLen6
}

// Marshal writes the header into b (at least Len bytes) and returns its
// length.
func (h *DSUDPHeader) Marshal(b []byte) int {
	binary.BigEndian.PutUint32(b, DSUDPTag)
	b[5], b[7] = h.Op, 0
	binary.BigEndian.PutUint32(b[8:], h.QPN&0xFFFFFF)
	a := h.Addr
	if a.Is4() {
		b[4], b[6] = 4, DSUDPHeaderLen4
		v := a.As4()
		copy(b[12:16], v[:])
		return DSUDPHeaderLen4
	}
	b[4], b[6] = 6, DSUDPHeaderLen6
	v := a.As16()
	copy(b[12:28], v[:])
	return DSUDPHeaderLen6
}

var errDSUDPHeader = &Error{Op: "recv", Reason: "bad datagram rsocket UDP header", Errno: syscall.EPROTO}

// ParseDSUDPHeader reads a DSUDPHeader received from an address of family
// v6 or not (udp_svc_valid_udp_hdr: the tag, and a version and length
// that match the sender's family) and returns it with its length.
func ParseDSUDPHeader(b []byte, v6 bool) (DSUDPHeader, int, error) {
	if len(b) < DSUDPHeaderLen4 || binary.BigEndian.Uint32(b) != DSUDPTag {
		return DSUDPHeader{}, 0, errDSUDPHeader
	}
	h := DSUDPHeader{Op: b[5], QPN: binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF}
	switch {
	case !v6 && b[4] == 4 && b[6] == DSUDPHeaderLen4:
		h.Addr = netip.AddrFrom4([4]byte(b[12:16]))
		return h, DSUDPHeaderLen4, nil
	case v6 && b[4] == 6 && b[6] == DSUDPHeaderLen6 && len(b) >= DSUDPHeaderLen6:
		h.Addr = netip.AddrFrom16([16]byte(b[12:28]))
		return h, DSUDPHeaderLen6, nil
	}
	return DSUDPHeader{}, 0, errDSUDPHeader
}
