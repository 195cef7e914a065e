package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestIPv4Header(t *testing.T) {
	// a textbook header (RFC 1071 style example): checksum 0xb861
	want, _ := hex.DecodeString("450000730000400040" + "11b861c0a80001c0a800c7")
	h := IPv4Header{TotalLen: 0x73, DF: true, TTL: 64, Src: [4]byte{192, 168, 0, 1}, Dst: [4]byte{192, 168, 0, 199}}
	got := h.Append([]byte{0xAA})
	if !bytes.Equal(got[1:], want) || got[0] != 0xAA {
		t.Errorf("Append = %x, want aa%x", got, want)
	}
	if c := IPv4Checksum(got[1:]); c != 0 {
		t.Errorf("checksum over a correct header = %#04x, want 0", c)
	}
	h = IPv4Header{TOS: 0x02, TotalLen: 1000, ID: 7, TTL: 1, Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}}
	var b [IPv4HeaderLen]byte
	h.Put(b[:])
	if b[1] != 0x02 || b[4] != 0 || b[5] != 7 || b[6] != 0 || b[8] != 1 || b[9] != ProtoUDP || IPv4Checksum(b[:]) != 0 {
		t.Errorf("Put = %x", b)
	}
}

func TestIPv6Header(t *testing.T) {
	h := IPv6Header{TrafficClass: 0xAB, PayloadLen: 0x1234, HopLimit: 64}
	h.Src[15], h.Dst[15] = 1, 2
	got := h.Append(nil)
	want, _ := hex.DecodeString("6ab00000123411400000000000000000000000000000000100000000000000000000000000000002")
	if !bytes.Equal(got, want) {
		t.Errorf("Append = %x, want %x", got, want)
	}
}

// TestIPv4ChecksumOptions: a header with options (IHL 6) is summed whole.
func TestIPv4ChecksumOptions(t *testing.T) {
	h := IPv4Header{TotalLen: 100, DF: true, TTL: 64, Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}}
	b := h.Append(nil)
	b[0] = 0x46
	b = append(b, 0x94, 0x04, 0, 0) // router alert
	b[10], b[11] = 0, 0
	c := IPv4Checksum(b)
	b[10], b[11] = byte(c>>8), byte(c)
	if IPv4Checksum(b) != 0 || IPv4Checksum(b[:20]) == 0 {
		t.Errorf("checksum %#04x does not cover the options", c)
	}
}

// TestOnesSum: RFC 1071's worked example (section 3), an odd length (the
// last byte padded with zero), a carry to fold, and the IPv4 header
// checksum as its complement.
func TestOnesSum(t *testing.T) {
	for _, tc := range []struct {
		s    uint32
		b    []byte
		want uint16
	}{
		{0, []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0xddf2},
		{0, []byte{0x12, 0x34, 0x56}, 0x6834},
		{0, []byte{0xff, 0xff, 0x00, 0x01}, 0x0001},
		{0x1_0000, []byte{0x00, 0x02}, 0x0003},
		{0, nil, 0},
	} {
		if got := OnesSum(tc.s, tc.b); got != tc.want {
			t.Errorf("OnesSum(%#x, % x) = %#04x, want %#04x", tc.s, tc.b, got, tc.want)
		}
	}
	// A textbook header (as TestIPv4Header's): checksum 0xb861.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if c := IPv4Checksum(h); c != 0xb861 {
		t.Errorf("IPv4Checksum = %#04x, want 0xb861", c)
	}
}
