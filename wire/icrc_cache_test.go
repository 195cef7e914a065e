package wire

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestICRCCache checks the cache against the package functions: packets of
// a few keys (addresses, length, first BTH bytes) in turn, so that it hits
// and misses, with every kind of IPv4 Identification, IPv6, short packets,
// corrupted ones and DF-clear senders.
func TestICRCCache(t *testing.T) {
	addrs := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:4791"),
		netip.MustParseAddrPort("10.0.0.2:49152"),
		netip.MustParseAddrPort("[::ffff:10.0.0.3]:4791"),
		netip.MustParseAddrPort("[fd00::1]:4791"),
		netip.MustParseAddrPort("[fd00::2]:50000"),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lens := []int{0, 3, 4, 5, 12, 28, 1036, 4108, 4124}
	var c ICRCCache
	for i := range 20000 {
		si, di := rng.IntN(len(addrs)), rng.IntN(len(addrs))
		src, dst := addrs[si], addrs[di]
		if src.Addr().Unmap().Is4() != dst.Addr().Unmap().Is4() {
			continue
		}
		pkt := make([]byte, lens[rng.IntN(len(lens))])
		for j := range pkt {
			pkt[j] = byte(rng.Uint32())
		}
		if len(pkt) >= 4 && rng.IntN(4) > 0 {
			copy(pkt, []byte{0x06, 0x40, 0xFF, 0xFF}) // RC WRITE_MIDDLE, the common key
		}
		id := uint16(0)
		if rng.IntN(2) == 0 {
			id = uint16(rng.Uint32())
		}
		if got, want := c.ICRCFor(src, dst, id, pkt), ICRCFor(src, dst, id, pkt); got != want {
			t.Fatalf("%d: ICRCFor(%v, %v, %d, %d bytes) = %#x, want %#x", i, src, dst, id, len(pkt), got, want)
		}
		if len(pkt) >= 4 {
			// Headers shorter than a BTH take the uncached path.
			at := min([]int{4, 5, 11, 12, 28}[rng.IntN(5)], len(pkt))
			end := max(len(pkt)-len(pkt)%4, at)
			if got, want := c.ICRCForGather(src, dst, id, pkt[:at], pkt[at:end], pkt[end:]),
				ICRCForGather(src, dst, id, pkt[:at], pkt[at:end], pkt[end:]); got != want {
				t.Fatalf("%d: ICRCForGather = %#x, want %#x", i, got, want)
			}
		}
		b := append(pkt, 0, 0, 0, 0)
		switch rng.IntN(4) {
		case 0: // as sent
			PutICRC(b, ICRCFor(src, dst, id, pkt))
		case 1: // DF clear
			if src.Addr().Unmap().Is4() {
				PutICRC(b, ICRCIPv4(src.Addr().Unmap().As4(), dst.Addr().Unmap().As4(), id, false, src.Port(), dst.Port(), pkt))
			}
		case 2: // corrupted
			PutICRC(b, ICRCFor(src, dst, id, pkt))
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		}
		gid, gok := c.VerifyICRCAddrs(src, dst, b)
		wid, wok := VerifyICRCAddrs(src, dst, b)
		if gid != wid || gok != wok {
			t.Fatalf("%d: VerifyICRCAddrs(%v, %v, %d bytes) = %d, %v; want %d, %v", i, src, dst, len(b), gid, gok, wid, wok)
		}
		if len(pkt) >= BTHLen {
			// The payload after a BTH (and a RETH), up to a pad, copied.
			off := []int{BTHLen, BTHLen + RETHLen}[rng.IntN(2)]
			off = min(off, len(pkt))
			end := max(len(pkt)-rng.IntN(4), off)
			to := make([]byte, end-off)
			if gid, gok := c.VerifyICRCCopy(src, dst, b, off, to); gid != wid || gok != wok {
				t.Fatalf("%d: VerifyICRCCopy(%v, %v, %d bytes, %d at %d) = %d, %v; want %d, %v", i, src, dst, len(b), len(to), off, gid, gok, wid, wok)
			}
			if string(to) != string(b[off:end]) {
				t.Fatalf("%d: VerifyICRCCopy copied other bytes", i)
			}
		}
	}
	if c.Hits == 0 || c.Misses == 0 {
		t.Errorf("hits %d, misses %d: the test should exercise both", c.Hits, c.Misses)
	}
}

// FuzzICRCCache: the cache gives the package functions' answers for any
// packet and IPv4 Identification, after any earlier packet.
func FuzzICRCCache(f *testing.F) {
	f.Add([]byte("0640ffff0000001280000001hello"), []byte("0640ffff0000001280000002hellp"), uint16(0), uint16(7))
	f.Add([]byte{}, []byte{1, 2, 3, 4, 5}, uint16(34605), uint16(0))
	src := netip.MustParseAddrPort("10.77.0.12:49441")
	dst := netip.MustParseAddrPort("10.77.0.11:4791")
	f.Fuzz(func(t *testing.T, a, b []byte, ida, idb uint16) {
		var c ICRCCache
		for _, p := range []struct {
			b  []byte
			id uint16
		}{{a, ida}, {b, idb}, {a, idb}} {
			if got, want := c.ICRCFor(src, dst, p.id, p.b), ICRCFor(src, dst, p.id, p.b); got != want {
				t.Fatalf("ICRCFor = %#x, want %#x", got, want)
			}
			gid, gok := c.VerifyICRCAddrs(src, dst, p.b)
			wid, wok := VerifyICRCAddrs(src, dst, p.b)
			if gid != wid || gok != wok {
				t.Fatalf("VerifyICRCAddrs = %d, %v; want %d, %v", gid, gok, wid, wok)
			}
		}
	})
}

func BenchmarkICRCCache4K(b *testing.B) {
	src := netip.MustParseAddrPort("10.0.0.1:4791")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	pkt := make([]byte, BTHLen+4096+ICRCLen)
	copy(pkt, []byte{0x06, 0x40, 0xFF, 0xFF})
	FillICRC(pkt, src, dst, 7)
	b.Run("verify/uncached", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		for range b.N {
			VerifyICRCAddrs(src, dst, pkt)
		}
	})
	b.Run("verify/cached", func(b *testing.B) {
		var c ICRCCache
		b.SetBytes(int64(len(pkt)))
		for range b.N {
			c.VerifyICRCAddrs(src, dst, pkt)
		}
	})
	b.Run("compute/uncached", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		for i := range b.N {
			FillICRC(pkt, src, dst, uint16(i))
		}
	})
	b.Run("compute/cached", func(b *testing.B) {
		var c ICRCCache
		b.SetBytes(int64(len(pkt)))
		for i := range b.N {
			c.FillICRC(pkt, src, dst, uint16(i))
		}
	})
	// As the zero-copy sender computes it: headers, payload and pad apart.
	b.Run("gather/cached", func(b *testing.B) {
		var c ICRCCache
		hdr, data := pkt[:BTHLen], pkt[BTHLen:len(pkt)-ICRCLen]
		b.SetBytes(int64(len(pkt)))
		for i := range b.N {
			c.ICRCForGather(src, dst, uint16(i), hdr, data, nil)
		}
	})
}
