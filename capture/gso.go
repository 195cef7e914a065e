package capture

import (
	"encoding/binary"
	"unsafe"

	"github.com/softroce/softroce/wire"
)

// A socket that sends with UDP GSO (UDP_SEGMENT, as link/udp does) hands
// the kernel one super-packet that the device, or the kernel just before
// it, cuts into datagrams of gso_size bytes of UDP payload. A capture on
// the loopback interface sees the super-packet whole: one oversized
// datagram whose ICRC fits none of its RoCE packets. SplitGSO cuts it as
// the kernel's UDP segmentation does, so each RoCE packet is decoded and
// its ICRC checked as the wire carries it.

// maxGSOSegment bounds the inferred segment size (the largest RoCE
// packet: 4096-byte MTU plus the longest headers).
const maxGSOSegment = 4096 + 128

// maxGSOTries bounds the ICRC checks spent on one datagram whose ICRC is
// wrong (a hostile or corrupted one need not cost more).
const maxGSOTries = 64

// SplitGSO splits frame (of link type lt) if it is a UDP GSO super-packet
// of RoCEv2 packets, each segment gsoSize bytes of UDP payload (the last
// may be shorter). With gsoSize 0 the size is inferred: the shortest
// segment length at which the next segment starts with a BTH of the same
// P_Key and whose first segment's ICRC is right. Each segment gets its own
// IP header (length; IPv4 Identification incremented per segment as Linux
// does; header checksum) and UDP header (length, checksum). It returns nil
// when frame is not such a super-packet (its ICRC is right as it is, it
// is truncated, or no size fits).
func SplitGSO(lt LinkType, frame []byte, gsoSize int) [][]byte {
	var p Packet
	if !ParseFrame(lt, frame, &p) || p.Truncated || len(p.Payload) < 2*(wire.BTHLen+wire.ICRCLen) {
		return nil
	}
	sport, dport := p.Src.Port(), p.Dst.Port()
	if gsoSize == 0 && wire.VerifyICRC(p.IPHdr, sport, dport, p.Payload) {
		return nil
	}
	ipOff := int(uintptr(unsafe.Pointer(&p.IPHdr[0])) - uintptr(unsafe.Pointer(&frame[0])))
	v4 := p.IPHdr[0]>>4 == 4
	if !v4 && p.IPHdr[6] != 17 {
		return nil // IPv6 extension headers: not what UDP GSO produces
	}
	udpOff := ipOff + len(p.IPHdr)
	pay := p.Payload
	// seg returns the frame of segment i (payload pay[a:b]).
	seg := func(i, a, b int) []byte {
		n := b - a
		out := make([]byte, 0, udpOff+8+n)
		out = append(out, frame[:udpOff]...)
		ip := out[ipOff:udpOff]
		if v4 {
			binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+8+n))
			binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(i))
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip))
		} else {
			binary.BigEndian.PutUint16(ip[4:], uint16(8+n))
		}
		var udp [8]byte
		binary.BigEndian.PutUint16(udp[0:], sport)
		binary.BigEndian.PutUint16(udp[2:], dport)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+n))
		out = append(out, udp[:]...)
		out = append(out, pay[a:b]...)
		binary.BigEndian.PutUint16(out[udpOff+6:], udpChecksum(ip, v4, out[udpOff:]))
		return out
	}
	size := gsoSize
	if size == 0 {
		tries := 0
		for s := wire.BTHLen + wire.ICRCLen; s < len(pay) && s <= maxGSOSegment && tries < maxGSOTries; s += 4 {
			next := pay[s:]
			if len(next) < wire.BTHLen || next[2] != pay[2] || next[3] != pay[3] || next[1]&0x0F != pay[1]&0x0F {
				continue
			}
			tries++
			first := seg(0, 0, s)
			if wire.VerifyICRC(first[ipOff:udpOff], sport, dport, first[udpOff+8:]) {
				size = s
				break
			}
		}
	}
	if size <= 0 || size >= len(pay) {
		return nil
	}
	var out [][]byte
	for i, a := 0, 0; a < len(pay); i, a = i+1, a+size {
		out = append(out, seg(i, a, min(a+size, len(pay))))
	}
	return out
}

// udpChecksum is the UDP checksum of udp (header with a zero checksum,
// then payload) under the pseudo-header of ip.
func udpChecksum(ip []byte, v4 bool, udp []byte) uint16 {
	udp[6], udp[7] = 0, 0
	var s uint32
	if v4 {
		s = uint32(wire.OnesSum(0, ip[12:20]))
	} else {
		s = uint32(wire.OnesSum(0, ip[8:40]))
	}
	s += 17 + uint32(len(udp))
	c := ^wire.OnesSum(s+uint32(wire.OnesSum(0, udp)), nil)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}
