package wire

import "encoding/binary"

// IP header lengths of RoCEv2 datagrams (no IPv4 options, no IPv6
// extension headers).
const (
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
)

// ProtoUDP is the IP protocol number (IPv6 next header) of UDP.
const ProtoUDP = 17

// IPv4Header is the IPv4 header of a RoCEv2 datagram: version 4, a 20-byte
// header, protocol UDP, no fragmentation. Linux sends RoCE with DF set and
// Identification 0 (see docs/protocol.md, "IPv4 Identification"); the ICRC
// covers both.
type IPv4Header struct {
	TOS      uint8  // DSCP and ECN
	TotalLen uint16 // IP header, UDP header and UDP payload
	ID       uint16 // Identification
	DF       bool   // don't fragment
	TTL      uint8
	Src, Dst [4]byte
}

// Put writes the header, with its checksum, into the first IPv4HeaderLen
// bytes of b.
func (h *IPv4Header) Put(b []byte) {
	b = b[:IPv4HeaderLen]
	b[0], b[1] = 0x45, h.TOS
	binary.BigEndian.PutUint16(b[2:], h.TotalLen)
	binary.BigEndian.PutUint16(b[4:], h.ID)
	b[6], b[7] = 0, 0
	if h.DF {
		b[6] = 0x40
	}
	b[8], b[9], b[10], b[11] = h.TTL, ProtoUDP, 0, 0
	copy(b[12:16], h.Src[:])
	copy(b[16:20], h.Dst[:])
	binary.BigEndian.PutUint16(b[10:], IPv4Checksum(b[:IPv4HeaderLen]))
}

// Append appends the header, with its checksum, to b.
func (h *IPv4Header) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, IPv4HeaderLen)...)
	h.Put(b[n:])
	return b
}

// IPv4Checksum returns the Internet checksum (RFC 1071) of the IPv4 header
// h (20 bytes, more with options; a multiple of 4 long): with h's checksum
// field zero it is the value to store there; over a header with a correct
// checksum it is 0.
func IPv4Checksum(h []byte) uint16 { return ^OnesSum(0, h) }

// OnesSum adds b, as big-endian 16-bit words (an odd last byte padded with
// a zero), to the ones'-complement sum s and returns the folded 16-bit sum
// (RFC 1071). An Internet checksum is ^OnesSum(0, data); a UDP checksum
// starts from the pseudo-header's sum.
func OnesSum(s uint32, b []byte) uint16 {
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// IPv6Header is the IPv6 header of a RoCEv2 datagram: next header UDP,
// flow label 0.
type IPv6Header struct {
	TrafficClass uint8  // DSCP and ECN
	PayloadLen   uint16 // UDP header and UDP payload
	HopLimit     uint8
	Src, Dst     [16]byte
}

// Put writes the header into the first IPv6HeaderLen bytes of b.
func (h *IPv6Header) Put(b []byte) {
	b = b[:IPv6HeaderLen]
	b[0], b[1], b[2], b[3] = 0x60|h.TrafficClass>>4, h.TrafficClass<<4, 0, 0
	binary.BigEndian.PutUint16(b[4:], h.PayloadLen)
	b[6], b[7] = ProtoUDP, h.HopLimit
	copy(b[8:24], h.Src[:])
	copy(b[24:40], h.Dst[:])
}

// Append appends the header to b.
func (h *IPv6Header) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, IPv6HeaderLen)...)
	h.Put(b[n:])
	return b
}
