package wire

import (
	"net/netip"
	"testing"
)

// FuzzVerifyICRC: the ICRC check never panics, and a packet given a valid
// ICRC for any IPv4 ID verifies and yields that ID.
func FuzzVerifyICRC(f *testing.F) {
	f.Add([]byte("0400ffff0000001280000001hello"), uint16(0))
	f.Add([]byte{}, uint16(34605))
	src := netip.MustParseAddrPort("10.77.0.12:49441")
	dst := netip.MustParseAddrPort("10.77.0.11:4791")
	f.Fuzz(func(t *testing.T, b []byte, id uint16) {
		VerifyICRCAddrs(src, dst, b)
		pkt := append(append([]byte(nil), b...), 0, 0, 0, 0)
		PutICRC(pkt, ICRCIPv4(src.Addr().As4(), dst.Addr().As4(), id, true, src.Port(), dst.Port(), b))
		got, ok := VerifyICRCAddrs(src, dst, pkt)
		if !ok || got != id {
			t.Fatalf("id %d: got %d ok %v", id, got, ok)
		}
	})
}
