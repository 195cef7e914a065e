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
