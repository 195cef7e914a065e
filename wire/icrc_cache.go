package wire

import (
	"net/netip"
)

// ICRCCache computes and checks ICRCs faster for packets that share their
// addresses, their length and their first four BTH bytes (opcode, flags,
// P_Key) — the middle packets of a stream, which are most of its packets.
// Of the bytes the ICRC covers before the payload (eight 0xFF, the masked
// IP and UDP headers and the BTH's first four bytes, 40 for IPv4) it keeps
// the CRC of the last such prefix seen, computed for IPv4 Identification
// 0, and applies another Identification by linearity (two table steps and
// one 32-bit linear map) instead of running the CRC over the prefix again.
// The next eight bytes (the masked BTH byte 4, the destination QP, the
// AckReq byte and the PSN) take one slicing-by-8 step, so that the payload
// after the BTH starts the carry-less multiplication loop with no bytes
// left over for byte-at-a-time steps.
//
// The zero value is ready to use. An ICRCCache is not safe for concurrent
// use: give each sending or receiving goroutine its own.
type ICRCCache struct {
	src, dst netip.AddrPort
	pktLen   int
	bth      [4]byte
	ok       bool
	v4       bool
	pre      uint32 // CRC after the prefix, IPv4 Identification 0 and DF set
	// Hits and Misses count lookups that found the prefix and that
	// computed it.
	Hits, Misses uint64
}

// prefixZ is the number of prefix bytes after the IPv4 Identification:
// the rest of the IPv4 header (14), the UDP header (8) and BTH bytes 0-3.
const prefixZ = 14 + 8 + 4

// idShift is F^prefixZ (prefixZ zero-byte steps of the CRC register) as
// byte tables: it carries the change an Identification makes to the
// register to the end of the prefix.
var idShift [4][256]uint32

func init() {
	var m [32]uint32
	for k := range m {
		r := uint32(1) << k
		for range prefixZ {
			r = crcTab[byte(r)] ^ r>>8
		}
		m[k] = r
	}
	byteTables(&idShift, &m)
}

// prefix returns the CRC after the prefix of pkt (BTH through pad, at
// least 4 bytes) sent from src to dst with IPv4 Identification id.
func (c *ICRCCache) prefix(src, dst netip.AddrPort, id uint16, pkt []byte, pktLen int) uint32 {
	b := [4]byte(pkt[:4])
	if !c.ok || c.pktLen != pktLen || c.bth != b || c.src != src || c.dst != dst {
		c.Misses++
		c.src, c.dst, c.pktLen, c.bth, c.ok = src, dst, pktLen, b, true
		c.v4 = src.Addr().Unmap().Is4()
		c.pre = crcSmall(icrcMasked(src, dst, 0, pktLen), pkt[:4])
	} else {
		c.Hits++
	}
	if id == 0 || !c.v4 {
		return c.pre
	}
	// The register change the two ID bytes make (from a zero change), then
	// carried over the rest of the prefix.
	r1 := crcTab[id>>8]
	d := crcTab[byte(r1)^byte(id)] ^ r1>>8
	return c.pre ^ idShift[0][byte(d)] ^ idShift[1][byte(d>>8)] ^ idShift[2][byte(d>>16)] ^ idShift[3][d>>24]
}

// afterPrefix continues crc (after BTH bytes 0-3) over hdr[4:], BTH byte 4
// masked: hdr holds at least a whole BTH. The masked byte and BTH bytes
// 5-11 are one slicing-by-8 step; hash/crc32 would take the seven bytes
// left over after its 16-byte blocks one at a time, through four calls.
// The step is crcSmall's loop body written out: calling crcSmall on an
// 8-byte copy measured slower for a 4 KiB packet (BenchmarkICRCCache4K;
// docs/speed.md, "Numbers behind code comments").
func afterPrefix(crc uint32, hdr []byte) uint32 {
	_ = hdr[BTHLen-1]
	t := &crcTab8
	c := ^crc ^ (0xFF | uint32(hdr[5])<<8 | uint32(hdr[6])<<16 | uint32(hdr[7])<<24)
	c = t[0][hdr[11]] ^ t[1][hdr[10]] ^ t[2][hdr[9]] ^ t[3][hdr[8]] ^
		t[4][c>>24] ^ t[5][byte(c>>16)] ^ t[6][byte(c>>8)] ^ t[7][byte(c)]
	return crcUpdate(^c, hdr[BTHLen:])
}

// ICRCFor is ICRCFor (the package function) through the cache.
func (c *ICRCCache) ICRCFor(src, dst netip.AddrPort, ipv4ID uint16, pkt []byte) uint32 {
	if len(pkt) < BTHLen {
		return ICRCFor(src, dst, ipv4ID, pkt)
	}
	return afterPrefix(c.prefix(src, dst, ipv4ID, pkt, len(pkt)), pkt)
}

// ICRCForGather is ICRCForGather (the package function) through the cache.
func (c *ICRCCache) ICRCForGather(src, dst netip.AddrPort, ipv4ID uint16, hdr, data, tail []byte) uint32 {
	if len(hdr) < BTHLen {
		return ICRCForGather(src, dst, ipv4ID, hdr, data, tail)
	}
	crc := afterPrefix(c.prefix(src, dst, ipv4ID, hdr, len(hdr)+len(data)+len(tail)), hdr)
	crc = crcUpdate(crc, data)
	return crcUpdate(crc, tail)
}

// FillICRC is FillICRC (the package function) through the cache.
func (c *ICRCCache) FillICRC(b []byte, src, dst netip.AddrPort, ipv4ID uint16) {
	PutICRC(b, c.ICRCFor(src, dst, ipv4ID, b[:len(b)-ICRCLen]))
}

// VerifyICRCAddrs is VerifyICRCAddrs (the package function) through the
// cache: the same answers, including the IPv4 Identification solved for.
func (c *ICRCCache) VerifyICRCAddrs(src, dst netip.AddrPort, b []byte) (id uint16, ok bool) {
	if len(b) < ICRCLen+BTHLen {
		return VerifyICRCAddrs(src, dst, b)
	}
	pkt := b[:len(b)-ICRCLen]
	return c.solve(src, dst, b, afterPrefix(c.prefix(src, dst, 0, pkt, len(pkt)), pkt))
}

// VerifyICRCCopy is VerifyICRCAddrs that also copies the len(to) bytes of
// b at off (a packet's payload, after its whole BTH) into to while it runs
// the CRC over them: one pass over the payload instead of two. The copy is
// made whatever the answer: to must be memory that a packet failing the
// check may scribble on (a part of a message still in flight, which the
// packet's retransmission rewrites). It copies nothing and reports false if
// the bytes are not inside b's packet after its BTH.
func (c *ICRCCache) VerifyICRCCopy(src, dst netip.AddrPort, b []byte, off int, to []byte) (id uint16, ok bool) {
	n := len(to)
	if off < BTHLen || off+n > len(b)-ICRCLen {
		return 0, false
	}
	pkt := b[:len(b)-ICRCLen]
	crc := afterPrefix(c.prefix(src, dst, 0, pkt, len(pkt)), pkt[:off])
	crc = crcCopy(crc, to, pkt[off:off+n])
	return c.solve(src, dst, b, crcUpdate(crc, pkt[off+n:]))
}

// solve finishes a check of b: c0 is its ICRC computed with IPv4
// Identification 0 and DF set (the cache's prefix).
func (c *ICRCCache) solve(src, dst netip.AddrPort, b []byte, c0 uint32) (id uint16, ok bool) {
	pkt, rx := b[:len(b)-ICRCLen], GetICRC(b)
	if c0 == rx {
		return 0, true
	}
	if !c.v4 {
		return 0, false
	}
	if id, ok := solveID(c0^rx, 14+8+len(pkt)); ok {
		return id, true
	}
	// DF clear (not what Linux sends RoCE with): the full check, uncached.
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	c0 = ICRCIPv4(sa.As4(), da.As4(), 0, false, src.Port(), dst.Port(), pkt)
	if c0 == rx {
		return 0, true
	}
	return solveID(c0^rx, 14+8+len(pkt))
}
