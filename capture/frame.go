package capture

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"time"
)

// LinkType is a pcap link-layer header type (LINKTYPE_* of tcpdump.org).
type LinkType uint32

// Link types the Reader understands. The Writer produces LinkTypeEthernet
// (synthesised frames) or whatever Options.LinkType says (raw frames).
const (
	LinkTypeNull      LinkType = 0   // BSD loopback: 4-byte host-order address family
	LinkTypeEthernet  LinkType = 1   // Ethernet II, optionally 802.1Q/802.1ad tagged
	LinkTypeRaw       LinkType = 101 // raw IPv4 or IPv6, no link header
	LinkTypeLoop      LinkType = 108 // OpenBSD loopback: 4-byte network-order address family
	LinkTypeLinuxSLL  LinkType = 113 // Linux cooked capture v1 ("tcpdump -i any", older libpcap)
	LinkTypeIPv4      LinkType = 228 // raw IPv4
	LinkTypeIPv6      LinkType = 229 // raw IPv6
	LinkTypeLinuxSLL2 LinkType = 276 // Linux cooked capture v2 ("tcpdump -i any")
)

// String returns the tcpdump name of the link type, e.g. "EN10MB".
func (t LinkType) String() string {
	switch t {
	case LinkTypeNull:
		return "NULL"
	case LinkTypeEthernet:
		return "EN10MB"
	case LinkTypeRaw:
		return "RAW"
	case LinkTypeLoop:
		return "LOOP"
	case LinkTypeLinuxSLL:
		return "LINUX_SLL"
	case LinkTypeIPv4:
		return "IPV4"
	case LinkTypeIPv6:
		return "IPV6"
	case LinkTypeLinuxSLL2:
		return "LINUX_SLL2"
	}
	return "LINKTYPE_" + strconv.FormatUint(uint64(t), 10)
}

// Supported reports whether the Reader can find IP packets in frames of this type.
func (t LinkType) Supported() bool {
	switch t {
	case LinkTypeNull, LinkTypeEthernet, LinkTypeRaw, LinkTypeLoop, LinkTypeLinuxSLL,
		LinkTypeIPv4, LinkTypeIPv6, LinkTypeLinuxSLL2:
		return true
	}
	return false
}

// EtherTypes.
const (
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86DD
	etherTypeVLAN  = 0x8100
	etherTypeQinQ  = 0x88A8
	etherTypeQinQ2 = 0x9100
)

// Packet is one RoCEv2 datagram found in a capture. The slices alias the
// Reader's buffer and are valid until the next call to Next.
type Packet struct {
	// Time is the capture timestamp.
	Time time.Time
	// Frame is the 1-based number of the frame in the file (as Wireshark counts).
	Frame uint64
	// Src and Dst are the IP addresses and UDP ports.
	Src, Dst netip.AddrPort
	// IPHdr is the IP header as captured: 20 bytes (more with options) for
	// IPv4, 40 for IPv6 (extension headers not included).
	IPHdr []byte
	// Payload is the UDP payload: BTH through ICRC.
	Payload []byte
	// VLAN is the 802.1Q VLAN ID of the innermost tag, or -1 if untagged.
	VLAN int
	// Truncated reports that the capture kept less than the whole datagram
	// (snap length): Payload is then a prefix and its ICRC cannot be checked.
	Truncated bool
	// Len is the UDP payload length the UDP header declares (len(Payload)
	// unless Truncated).
	Len int
	// WireLen is the frame's length on the wire, as recorded in the file.
	WireLen int
}

// Lengths of fixed headers.
const (
	ethHdrLen  = 14
	ipv4HdrLen = 20
	ipv6HdrLen = 40
	udpHdrLen  = 8
	sllHdrLen  = 16
	sll2HdrLen = 20
)

// ParseFrame finds a UDP datagram in frame b of link type lt and fills the
// address, header and payload fields of p. It reports false for anything
// that is not a complete-enough UDP datagram (ARP, TCP, fragments, ...).
func ParseFrame(lt LinkType, b []byte, p *Packet) bool {
	p.VLAN = -1
	var et uint16
	switch lt {
	case LinkTypeEthernet:
		if len(b) < ethHdrLen {
			return false
		}
		et = binary.BigEndian.Uint16(b[12:])
		b = b[ethHdrLen:]
		for et == etherTypeVLAN || et == etherTypeQinQ || et == etherTypeQinQ2 {
			if len(b) < 4 {
				return false
			}
			p.VLAN = int(binary.BigEndian.Uint16(b) & 0xFFF)
			et = binary.BigEndian.Uint16(b[2:])
			b = b[4:]
		}
	case LinkTypeLinuxSLL:
		if len(b) < sllHdrLen {
			return false
		}
		et = binary.BigEndian.Uint16(b[14:])
		b = b[sllHdrLen:]
	case LinkTypeLinuxSLL2:
		if len(b) < sll2HdrLen {
			return false
		}
		et = binary.BigEndian.Uint16(b[0:])
		b = b[sll2HdrLen:]
	case LinkTypeNull, LinkTypeLoop:
		if len(b) < 4 {
			return false
		}
		// The family is in host order (NULL) or network order (LOOP); its
		// values are small, so look at whichever end is non-zero.
		fam := binary.LittleEndian.Uint32(b)
		if fam > 0xFFFF {
			fam = binary.BigEndian.Uint32(b)
		}
		switch fam {
		case 2:
			et = etherTypeIPv4
		case 10, 24, 28, 30: // AF_INET6 on Linux, NetBSD/OpenBSD, FreeBSD, Darwin
			et = etherTypeIPv6
		default:
			return false
		}
		b = b[4:]
	case LinkTypeRaw:
		if len(b) < 1 {
			return false
		}
		switch b[0] >> 4 {
		case 4:
			et = etherTypeIPv4
		case 6:
			et = etherTypeIPv6
		default:
			return false
		}
	case LinkTypeIPv4:
		et = etherTypeIPv4
	case LinkTypeIPv6:
		et = etherTypeIPv6
	default:
		return false
	}
	switch et {
	case etherTypeIPv4:
		return parseIPv4(b, p)
	case etherTypeIPv6:
		return parseIPv6(b, p)
	}
	return false
}

// parseIPv4 parses an IPv4 packet carrying UDP.
func parseIPv4(b []byte, p *Packet) bool {
	if len(b) < ipv4HdrLen || b[0]>>4 != 4 {
		return false
	}
	ihl := int(b[0]&0xF) * 4
	if ihl < ipv4HdrLen || len(b) < ihl+udpHdrLen || b[9] != 17 {
		return false
	}
	// Fragments: neither MF nor an offset (only unfragmented datagrams are RoCE).
	if binary.BigEndian.Uint16(b[6:])&0x3FFF != 0 {
		return false
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total < ihl+udpHdrLen {
		return false
	}
	p.IPHdr = b[:ihl:ihl]
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	return parseUDP(b[ihl:], total-ihl, src, dst, p)
}

// IPv6 extension headers that may precede UDP.
const (
	ipv6HopByHop = 0
	ipv6Routing  = 43
	ipv6Fragment = 44
	ipv6DestOpts = 60
)

// parseIPv6 parses an IPv6 packet carrying UDP, after any hop-by-hop,
// routing or destination-options headers.
func parseIPv6(b []byte, p *Packet) bool {
	if len(b) < ipv6HdrLen || b[0]>>4 != 6 {
		return false
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	next := b[6]
	p.IPHdr = b[:ipv6HdrLen:ipv6HdrLen]
	src := netip.AddrFrom16([16]byte(b[8:24]))
	dst := netip.AddrFrom16([16]byte(b[24:40]))
	b = b[ipv6HdrLen:]
	for next != 17 {
		switch next {
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts:
			if len(b) < 8 {
				return false
			}
			n := (int(b[1]) + 1) * 8
			if len(b) < n || plen < n {
				return false
			}
			next = b[0]
			b = b[n:]
			plen -= n
		default: // fragment, ESP, TCP, ...
			return false
		}
	}
	return parseUDP(b, plen, src, dst, p)
}

// parseUDP parses the UDP header at b; ipPayload is the IP payload length
// the IP header declares (it bounds the datagram against link padding).
func parseUDP(b []byte, ipPayload int, src, dst netip.Addr, p *Packet) bool {
	if len(b) < udpHdrLen || ipPayload < udpHdrLen {
		return false
	}
	sport := binary.BigEndian.Uint16(b)
	dport := binary.BigEndian.Uint16(b[2:])
	ulen := int(binary.BigEndian.Uint16(b[4:]))
	if ulen < udpHdrLen || ulen > ipPayload {
		if ulen == 0 && ipPayload > 0xFFFF { // IPv6 jumbogram: use the IP length
			ulen = ipPayload
		} else {
			return false
		}
	}
	p.Src = netip.AddrPortFrom(src, sport)
	p.Dst = netip.AddrPortFrom(dst, dport)
	b = b[udpHdrLen:]
	n := ulen - udpHdrLen
	p.Len = n
	p.Truncated = len(b) < n
	if p.Truncated {
		n = len(b)
	}
	p.Payload = b[:n:n]
	return true
}
