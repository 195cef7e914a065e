package wire

import (
	"net/netip"
	"path/filepath"
	"testing"
)

// FuzzParse: any input parses or is rejected with a *ParseError, never a
// panic; whatever parses re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	for _, v := range icrcVectors {
		b := unhex(f, v.hex)
		ihl := 20
		if b[0]>>4 == 6 {
			ihl = 40
		}
		f.Add(b[ihl+8:])
	}
	files, _ := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	seen := map[Opcode]bool{}
	for _, file := range files {
		for _, rp := range readRoCE(f, file) {
			if op := Opcode(rp.udp[0]); !seen[op] {
				seen[op] = true
				f.Add(rp.udp)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Parse(b); err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			return
		}
		enc := p.Append(nil)
		PutICRC(enc, p.ICRC)
		// Pad bytes are not kept by Parse; compare everything else.
		pad := int(p.BTH.PadCnt)
		n := len(b) - ICRCLen - pad
		if string(enc[:n]) != string(b[:n]) || string(enc[len(enc)-ICRCLen:]) != string(b[len(b)-ICRCLen:]) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", b, enc)
		}
	})
}

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
