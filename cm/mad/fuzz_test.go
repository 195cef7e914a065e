package mad

import (
	"bytes"
	"testing"
)

// FuzzParse feeds arbitrary bytes to every decoder: no panic, and whatever
// parses re-encodes to the input with only reserved bits cleared. The input is
// tried both as is and with a valid CM header forced onto it for each
// message type, so every decoder sees arbitrary message bodies.
func FuzzParse(f *testing.F) {
	for _, name := range captures {
		for _, m := range cmMADs(f, name) {
			f.Add(m.pkt.Payload)
		}
	}
	f.Add(bytes.Repeat([]byte{0xFF}, MADLen))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := ParseMessage(data); err == nil {
			check(t, m, data)
		}
		_, _, _ = ParseCMAHeader(data)
		b := make([]byte, MADLen)
		copy(b, data)
		for _, a := range allAttrs() {
			fixHeader(b, a)
			m, _ := NewMessage(a)
			if err := m.Parse(b); err != nil {
				t.Fatalf("%v: valid header rejected: %v", a, err)
			}
			check(t, m, b)
			if a == AttrREQ || a == AttrSIDRREQ {
				if h, _, err := ParseCMAHeader(pdOf(m)); err == nil {
					if _, err := h.Append(nil); err != nil {
						t.Fatalf("parsed cma_hdr %+v does not encode: %v", h, err)
					}
				}
			}
		}
	})
}

func check(t *testing.T, m Message, in []byte) {
	t.Helper()
	out, err := m.Append(nil)
	if err != nil {
		t.Fatalf("%v: append of a parsed message: %v", m.Attr(), err)
	}
	if want := canonical(in, m.Attr()); !bytes.Equal(out, want) {
		t.Fatalf("%v: round trip\n got %x\nwant %x", m.Attr(), out, want)
	}
}
