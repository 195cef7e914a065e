package wire

import (
	"bytes"
	"testing"
)

// TestHeaderEveryBit: every header decodes each single bit (and all bits
// set) to a value that encodes back to the same bytes, so no bit is lost,
// moved or taken from a neighbouring field.
func TestHeaderEveryBit(t *testing.T) {
	type codec interface {
		Append([]byte) []byte
	}
	for _, h := range []struct {
		name   string
		n      int
		decode func([]byte) codec
	}{
		{"BTH", BTHLen, func(b []byte) codec { var h BTH; h.Decode(b); return &h }},
		{"RETH", RETHLen, func(b []byte) codec { var h RETH; h.Decode(b); return &h }},
		{"AETH", AETHLen, func(b []byte) codec { var h AETH; h.Decode(b); return &h }},
		{"AtomicETH", AtomicETHLen, func(b []byte) codec { var h AtomicETH; h.Decode(b); return &h }},
		{"AtomicAckETH", AtomicAckETHLen, func(b []byte) codec { var h AtomicAckETH; h.Decode(b); return &h }},
		{"DETH", DETHLen, func(b []byte) codec { var h DETH; h.Decode(b); return &h }},
		{"FETH", FETHLen, func(b []byte) codec { var h FETH; h.Decode(b); return &h }},
	} {
		for bit := -1; bit < h.n*8; bit++ {
			in := make([]byte, h.n)
			if bit < 0 {
				for i := range in {
					in[i] = 0xFF
				}
			} else {
				in[bit/8] = 0x80 >> (bit % 8)
			}
			if got := h.decode(in).Append(nil); !bytes.Equal(got, in) {
				t.Errorf("%s with bit %d set: decodes to %+v, which encodes to % x", h.name, bit, h.decode(in), got)
			}
		}
	}
}
