package verbs

import "testing"

// TestUDPSport checks the per-QP UDP source port against the values the
// kernel's rxe used in the captures (testdata, README of the captures) and
// the worked examples of docs/protocol.md §1.3.
func TestUDPSport(t *testing.T) {
	for _, c := range []struct {
		l, r uint32
		want uint16
	}{
		{0x11, 0x11, 49441}, {0x12, 0x12, 49476}, {0x15, 0x15, 49593}, {0x16, 0x16, 49636},
		{0x17, 0x17, 49681}, {0x18, 0x18, 49728}, {0x19, 0x19, 49777},
		{0x11, 0x12, 0xC132}, {0x1234, 0x5678, 0xC01A},
	} {
		if got := UDPSport(0, c.l, c.r); got != c.want {
			t.Errorf("UDPSport(0, %#x, %#x) = %d, want %d", c.l, c.r, got, c.want)
		}
	}
	// UD QPs keep the port chosen at creation: hash_32(qpn, 14) (ud_pingpong: QPN 0x13 -> 53368).
	if got := rxeSport(0x13); got != 53368 {
		t.Errorf("rxeSport(0x13) = %d, want 53368", got)
	}
}
