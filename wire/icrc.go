package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The ICRC (docs/protocol.md §4) is CRC-32 (IEEE, as Ethernet) over eight 0xFF bytes
// (the masked LRH), the IP header, the UDP header and the packet from the BTH
// through the pad, with the variant fields masked to all-ones: IPv4 TOS, TTL
// and header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; BTH byte 4 (FECN, BECN, reserved). It is sent little-endian.

var (
	ff8       = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	crcAfterL = crc32.Update(0, crc32.IEEETable, ff8[:])
)

// icrcTail continues crc over pkt (BTH through pad) with BTH byte 4 masked.
func icrcTail(crc uint32, pkt []byte) uint32 {
	if len(pkt) < 5 {
		return crcUpdate(crc, pkt)
	}
	var b4 [5]byte
	copy(b4[:4], pkt)
	b4[4] = 0xFF
	return crcUpdate(crcSmall(crc, b4[:]), pkt[5:])
}

// crcSmall continues a CRC-32 (IEEE) over a few header bytes, eight at a
// time with slicing-by-8 tables; unlike crc32.Update it lets stack buffers
// stay on the stack.
func crcSmall(crc uint32, b []byte) uint32 {
	crc = ^crc
	t := &crcTab8
	for len(b) >= 8 {
		crc ^= binary.LittleEndian.Uint32(b)
		crc = t[0][b[7]] ^ t[1][b[6]] ^ t[2][b[5]] ^ t[3][b[4]] ^
			t[4][crc>>24] ^ t[5][byte(crc>>16)] ^ t[6][byte(crc>>8)] ^ t[7][byte(crc)]
		b = b[8:]
	}
	for _, v := range b {
		crc = crcTab[byte(crc)^v] ^ crc>>8 // hash/crc32's own table: shared cache lines
	}
	return ^crc
}

// ICRC computes the ICRC of a RoCEv2 packet from its IP header as on the wire
// (a 20-byte IPv4 header without options, or a 40-byte IPv6 header), its UDP
// header (8 bytes) and pkt, the UDP payload without the trailing 4 ICRC bytes.
// It does not modify its inputs and does not allocate.
func ICRC(ipHdr, udpHdr, pkt []byte) uint32 {
	var h [MaxIPHeaderLen + 8]byte
	n := copy(h[:], ipHdr)
	if n == 40 {
		h[0] |= 0x0F // traffic class (low nibble of byte 0, high nibble of byte 1) and flow label
		h[1], h[2], h[3] = 0xFF, 0xFF, 0xFF
		h[7] = 0xFF // hop limit
	} else if n >= 20 {
		h[1] = 0xFF               // TOS
		h[8] = 0xFF               // TTL
		h[10], h[11] = 0xFF, 0xFF // header checksum
	}
	copy(h[n:], udpHdr[:8])
	h[n+6], h[n+7] = 0xFF, 0xFF // UDP checksum
	return icrcTail(crcSmall(crcAfterL, h[:n+8]), pkt)
}

// MaxIPHeaderLen is the longest IP header the ICRC code handles (IPv6).
const MaxIPHeaderLen = 40

// icrcMaskedV4 returns the CRC state after the masked IPv4+UDP headers.
func icrcMaskedV4(src, dst [4]byte, id uint16, df bool, sport, dport uint16, pktLen int) uint32 {
	var h [28]byte
	total := 20 + 8 + pktLen + ICRCLen
	h[0] = 0x45
	h[1] = 0xFF
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	binary.BigEndian.PutUint16(h[4:], id)
	if df {
		h[6] = 0x40
	}
	h[8] = 0xFF
	h[9] = 17
	h[10], h[11] = 0xFF, 0xFF
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	binary.BigEndian.PutUint16(h[20:], sport)
	binary.BigEndian.PutUint16(h[22:], dport)
	binary.BigEndian.PutUint16(h[24:], uint16(8+pktLen+ICRCLen))
	h[26], h[27] = 0xFF, 0xFF
	return crcSmall(crcAfterL, h[:])
}

// ICRCIPv4 computes the ICRC for pkt (BTH through pad) sent in an IPv4
// datagram (20-byte header) with the given addresses, Identification and DF
// flag (TOS and TTL are masked, so they do not matter).
func ICRCIPv4(src, dst [4]byte, id uint16, df bool, sport, dport uint16, pkt []byte) uint32 {
	return icrcTail(icrcMaskedV4(src, dst, id, df, sport, dport, len(pkt)), pkt)
}

// ICRCIPv6 computes the ICRC for pkt (BTH through pad) sent in an IPv6
// datagram (40-byte header, no extension headers).
func ICRCIPv6(src, dst [16]byte, sport, dport uint16, pkt []byte) uint32 {
	return icrcTail(icrcMaskedV6(src, dst, sport, dport, len(pkt)), pkt)
}

// icrcMaskedV6 returns the CRC state after the masked IPv6+UDP headers.
func icrcMaskedV6(src, dst [16]byte, sport, dport uint16, pktLen int) uint32 {
	var h [48]byte
	h[0], h[1], h[2], h[3] = 0x6F, 0xFF, 0xFF, 0xFF
	binary.BigEndian.PutUint16(h[4:], uint16(8+pktLen+ICRCLen))
	h[6] = 17
	h[7] = 0xFF
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	binary.BigEndian.PutUint16(h[40:], sport)
	binary.BigEndian.PutUint16(h[42:], dport)
	binary.BigEndian.PutUint16(h[44:], uint16(8+pktLen+ICRCLen))
	h[46], h[47] = 0xFF, 0xFF
	return crcSmall(crcAfterL, h[:])
}

// ICRCFor computes the ICRC for pkt (BTH through pad) between two UDP
// endpoints: IPv4 (including IPv4-mapped IPv6 addresses) with the given
// Identification and DF set, as Linux sends RoCE; otherwise IPv6.
func ICRCFor(src, dst netip.AddrPort, ipv4ID uint16, pkt []byte) uint32 {
	return icrcTail(icrcMasked(src, dst, ipv4ID, len(pkt)), pkt)
}

// icrcMasked returns the CRC state after the masked IP and UDP headers of a
// packet of pktLen bytes (BTH through pad) between src and dst, as ICRCFor
// sends it.
func icrcMasked(src, dst netip.AddrPort, ipv4ID uint16, pktLen int) uint32 {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if sa.Is4() {
		return icrcMaskedV4(sa.As4(), da.As4(), ipv4ID, true, src.Port(), dst.Port(), pktLen)
	}
	return icrcMaskedV6(sa.As16(), da.As16(), src.Port(), dst.Port(), pktLen)
}

// ICRCForGather is ICRCFor for a packet held in three pieces, as a
// zero-copy send hands it to the kernel: hdr (from the BTH, at least
// BTHLen bytes), data (the payload, in place) and tail (the pad; the ICRC
// itself not included). It computes one CRC pass over the three, with no
// copy.
func ICRCForGather(src, dst netip.AddrPort, ipv4ID uint16, hdr, data, tail []byte) uint32 {
	crc := icrcTail(icrcMasked(src, dst, ipv4ID, len(hdr)+len(data)+len(tail)), hdr)
	crc = crcUpdate(crc, data)
	return crcUpdate(crc, tail)
}

// PutICRC stores v in the last 4 bytes of b (a whole UDP payload), little-endian.
func PutICRC(b []byte, v uint32) { binary.LittleEndian.PutUint32(b[len(b)-ICRCLen:], v) }

// GetICRC returns the ICRC stored in the last 4 bytes of b.
func GetICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b[len(b)-ICRCLen:]) }

// FillICRC computes and stores the ICRC of b (a whole UDP payload, ICRC last)
// for a datagram from src to dst with the given IPv4 Identification.
func FillICRC(b []byte, src, dst netip.AddrPort, ipv4ID uint16) {
	PutICRC(b, ICRCFor(src, dst, ipv4ID, b[:len(b)-ICRCLen]))
}

// VerifyICRC checks b (a whole UDP payload) against the IP header it arrived
// in (ipHdr as on the wire) and its UDP ports: the full check.
func VerifyICRC(ipHdr []byte, sport, dport uint16, b []byte) bool {
	if len(b) < ICRCLen {
		return false
	}
	var udp [8]byte
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(b)))
	return ICRC(ipHdr, udp[:], b[:len(b)-ICRCLen]) == GetICRC(b)
}

// VerifyICRCAddrs checks b (a whole UDP payload) when only the addresses are
// known, as on a UDP socket. For IPv6 the header is fully determined (its
// variant fields are masked) and the check is complete. For IPv4 the 16-bit
// Identification is covered by the ICRC but unseen, so it is solved for: the
// CRC is linear, and the packet is accepted only if some ID (with DF set, or
// else clear) makes the ICRC match; a corrupted packet still fails with
// probability 1-2^-16. It returns the ID that matched (IPv4).
func VerifyICRCAddrs(src, dst netip.AddrPort, b []byte) (id uint16, ok bool) {
	if len(b) < ICRCLen {
		return 0, false
	}
	pkt, rx := b[:len(b)-ICRCLen], GetICRC(b)
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if !sa.Is4() {
		return 0, ICRCIPv6(sa.As16(), da.As16(), src.Port(), dst.Port(), pkt) == rx
	}
	for _, df := range [2]bool{true, false} {
		c0 := ICRCIPv4(sa.As4(), da.As4(), 0, df, src.Port(), dst.Port(), pkt)
		if c0 == rx {
			return 0, true // ID 0: what Linux writes for softroce's own sockets
		}
		// Bytes of CRC input after the ID field: rest of the IPv4 header (14),
		// UDP header (8) and the packet.
		if id, ok := solveID(c0^rx, 14+8+len(pkt)); ok {
			return id, true
		}
	}
	return 0, false
}

// CRC linearity: changing the 2 ID bytes from 0 to x changes the final CRC by
// F^z(s(x)), where s(x) is the register after feeding x's two bytes from a
// zero register and F is one step over a zero byte (a linear, invertible map
// of the 32-bit register), z the number of bytes after the ID. So given the
// difference d, undo z zero-byte steps, then invert the two table steps.

var (
	crcTab    = crc32.IEEETable
	crcTab8   [8][256]uint32 // slicing-by-8 tables: crcTab8[k][i] = i followed by k zero bytes
	crcTopInv [256]uint8     // index i of crcTab by its top byte (a permutation)
	unshift   [16][32]uint32 // unshift[k] = matrix of F^-(2^k)
	// unshiftB[k][j][v] = unshift[k] applied to byte v in byte position j:
	// one matrix-vector product is four lookups.
	unshiftB [16][4][256]uint32
)

func init() {
	crcTab8[0] = *crcTab
	for i := 0; i < 256; i++ {
		crcTopInv[crcTab[i]>>24] = uint8(i)
		for k := 1; k < 8; k++ {
			v := crcTab8[k-1][i]
			crcTab8[k][i] = crcTab[byte(v)] ^ v>>8
		}
	}
	// One inverse zero-byte step: r' = tab[r&0xFF] ^ r>>8, so i = r&0xFF is
	// found from the top byte of r', then r = (r' ^ tab[i])<<8 | i.
	for k := 0; k < 32; k++ {
		r := uint32(1) << k
		i := crcTopInv[r>>24]
		unshift[0][k] = (r^crcTab[i])<<8 | uint32(i)
	}
	for j := 1; j < 16; j++ {
		for k := 0; k < 32; k++ {
			unshift[j][k] = matVec(&unshift[j-1], unshift[j-1][k])
		}
	}
	for j := range unshift {
		byteTables(&unshiftB[j], &unshift[j])
	}
	initFullZ()
}

func matVec(m *[32]uint32, v uint32) uint32 {
	var r uint32
	for i := 0; v != 0; i, v = i+1, v>>1 {
		if v&1 != 0 {
			r ^= m[i]
		}
	}
	return r
}

// unshiftZ undoes z zero-byte steps of the register d.
func unshiftZ(d uint32, z int) uint32 {
	for j := 0; z != 0; j, z = j+1, z>>1 {
		if z&1 != 0 {
			t := &unshiftB[j]
			d = t[0][byte(d)] ^ t[1][byte(d>>8)] ^ t[2][byte(d>>16)] ^ t[3][d>>24]
		}
	}
	return d
}

// byteTables fills t with the lookup tables of the 32x32 bit matrix whose
// column k is m[k]: m applied to v is t[0][byte(v)] ^ ... ^ t[3][v>>24].
func byteTables(t *[4][256]uint32, m *[32]uint32) {
	for p := 0; p < 4; p++ {
		for v := 1; v < 256; v++ {
			bit := 0
			for v>>bit&1 == 0 {
				bit++
			}
			t[p][v] = t[p][v&(v-1)] ^ m[8*p+bit]
		}
	}
}

// fullZ holds F^-z as byte tables for the z of full-MTU packets without
// and with a RETH (BTH+MTU and BTH+RETH+MTU bytes, the bulk of RDMA WRITE
// and SEND traffic), so that their IPv4 ID is solved with four lookups.
var fullZ [10]struct {
	z int
	t [4][256]uint32
}

// fullZz is fullZ's z values alone, searched in one cache line rather than
// one line of each 4 KiB entry (the receive path's payload copies evict
// them between packets).
var fullZz [len(fullZ)]int

func initFullZ() {
	i := 0
	for mtu := 256; mtu <= 4096; mtu <<= 1 {
		for _, hdr := range [2]int{BTHLen, BTHLen + RETHLen} {
			e := &fullZ[i]
			e.z = 14 + 8 + hdr + mtu
			fullZz[i] = e.z
			var m [32]uint32
			for k := range m {
				m[k] = unshiftZ(1<<k, e.z)
			}
			byteTables(&e.t, &m)
			i++
		}
	}
}

func solveID(d uint32, z int) (uint16, bool) {
	if z < 0 || z >= 1<<16 {
		return 0, false
	}
	fast := false
	for i, fz := range fullZz {
		if fz == z {
			t := &fullZ[i].t
			d = t[0][byte(d)] ^ t[1][byte(d>>8)] ^ t[2][byte(d>>16)] ^ t[3][d>>24]
			fast = true
			break
		}
	}
	if !fast {
		d = unshiftZ(d, z)
	}
	// d = s(x): r1 = tab[hi]; d = tab[(r1^lo)&0xFF] ^ r1>>8.
	i := uint32(crcTopInv[d>>24])
	r1hi := d ^ crcTab[i] // = r1>>8
	hi := uint32(crcTopInv[byte(r1hi>>16)])
	r1 := crcTab[hi]
	if r1>>8 != r1hi {
		return 0, false
	}
	lo := (i ^ r1) & 0xFF
	return uint16(hi<<8 | lo), true
}
