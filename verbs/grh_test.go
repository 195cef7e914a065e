package verbs

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// TestBuildGRHSynthesized checks the GRH area a UD receive gets when the
// link does not show the IP header (UDP sockets): the header is made from
// the addresses, traffic class and TTL the socket reported, with the
// route's default hop limit when none was reported.
func TestBuildGRHSynthesized(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) {
		lp := &link.Packet{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), N: 100, TOS: 0x48}
		var g [grhLen]byte
		buildGRH(&g, lp)
		h := g[grhLen-wire.IPv4HeaderLen:]
		switch {
		case h[0] != 0x45 || h[1] != 0x48:
			t.Errorf("version/IHL %#x, TOS %#x", h[0], h[1])
		case binary.BigEndian.Uint16(h[2:]) != 20+8+100:
			t.Errorf("total length %d, want 128", binary.BigEndian.Uint16(h[2:]))
		case h[6] != 0x40 || h[8] != 64 || h[9] != 17:
			t.Errorf("flags %#x, TTL %d, protocol %d; want DF, 64, 17", h[6], h[8], h[9])
		case wire.IPv4Checksum(h) != 0:
			t.Errorf("header checksum does not verify")
		case netip.AddrFrom4([4]byte(h[12:16])) != lp.Src.Addr() || netip.AddrFrom4([4]byte(h[16:20])) != lp.Dst.Addr():
			t.Errorf("addresses %v -> %v", h[12:16], h[16:20])
		}
		for i, b := range g[:grhLen-wire.IPv4HeaderLen] {
			if b != 0 {
				t.Fatalf("byte %d of the GRH area before the IPv4 header is %#x, want 0", i, b)
			}
		}
	})
	t.Run("ipv6", func(t *testing.T) {
		lp := &link.Packet{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791"), N: 100, TOS: 0x48, TTL: 9}
		var g [grhLen]byte
		buildGRH(&g, lp)
		switch {
		case g[0] != 0x64 || g[1] != 0x80:
			t.Errorf("version/traffic class %#x %#x", g[0], g[1])
		case binary.BigEndian.Uint16(g[4:]) != 108 || g[6] != 17 || g[7] != 9:
			t.Errorf("payload length %d, next header %d, hop limit %d", binary.BigEndian.Uint16(g[4:]), g[6], g[7])
		case netip.AddrFrom16([16]byte(g[8:24])) != lp.Src.Addr() || netip.AddrFrom16([16]byte(g[24:40])) != lp.Dst.Addr():
			t.Errorf("addresses")
		}
	})
}

// TestRoCEPktType checks the SL of a UD receive: the L3 header type in the
// GRH area, as mlx5 reports it (UCX reads it to find the destination
// address in the GRH area).
func TestRoCEPktType(t *testing.T) {
	for _, tc := range []struct {
		name string
		lp   link.Packet
		want uint8
	}{
		{"ipv4 synthesized", link.Packet{Src: netip.MustParseAddrPort("10.0.0.1:49152")}, WCSLRoCEv2IPv4},
		{"ipv4-mapped", link.Packet{Src: netip.MustParseAddrPort("[::ffff:10.0.0.1]:49152")}, WCSLRoCEv2IPv4},
		{"ipv4 header", link.Packet{IPHdrLen: 20, Src: netip.MustParseAddrPort("[fd00::1]:1")}, WCSLRoCEv2IPv4},
		{"ipv6 synthesized", link.Packet{Src: netip.MustParseAddrPort("[fd00::1]:49152")}, WCSLRoCEv2IPv6},
		{"ipv6 header", link.Packet{IPHdrLen: 40, Src: netip.MustParseAddrPort("10.0.0.1:1")}, WCSLRoCEv2IPv6},
	} {
		if got := rocePktType(&tc.lp); got != tc.want {
			t.Errorf("%s: SL %#x, want %#x", tc.name, got, tc.want)
		}
	}
}
