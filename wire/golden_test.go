package wire_test

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// capturesDir holds pcaps of real kernel rxe traffic (see its README).
const capturesDir = "../testdata/captures"

type rocePkt struct {
	frame int
	ip    []byte // IP header as on the wire
	sport uint16
	dport uint16
	udp   []byte // UDP payload: BTH .. ICRC
}

// readRoCE returns the RoCEv2 (UDP 4791) packets of a capture.
func readRoCE(t testing.TB, path string) []rocePkt {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []rocePkt
	for _, p := range pkts {
		if p.Truncated {
			t.Fatalf("%s frame %d: truncated", path, p.Frame)
		}
		out = append(out, rocePkt{int(p.Frame), p.IPHdr, p.Src.Port(), p.Dst.Port(), p.Payload})
	}
	return out
}

func captureFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in %s: %v", capturesDir, err)
	}
	return files
}

// FuzzParse: any input parses or is rejected with a *ParseError, never a
// panic; whatever parses re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	for _, b := range wire.ICRCVectorPayloads(f) {
		f.Add(b)
	}
	files, _ := filepath.Glob(filepath.Join(capturesDir, "*.pcap"))
	seen := map[wire.Opcode]bool{}
	for _, file := range files {
		for _, rp := range readRoCE(f, file) {
			if op := wire.Opcode(rp.udp[0]); !seen[op] {
				seen[op] = true
				f.Add(rp.udp)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := p.Parse(b); err != nil {
			if _, ok := err.(*wire.ParseError); !ok {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			return
		}
		enc := p.Append(nil)
		wire.PutICRC(enc, p.ICRC)
		// Pad bytes are not kept by Parse; compare everything else.
		pad := int(p.BTH.PadCnt)
		n := len(b) - wire.ICRCLen - pad
		if string(enc[:n]) != string(b[:n]) || string(enc[len(enc)-wire.ICRCLen:]) != string(b[len(b)-wire.ICRCLen:]) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", b, enc)
		}
	})
}

// TestGoldenCaptures checks every RoCEv2 packet rxe sent in the captures:
// it parses, re-encoding the parsed headers gives the same bytes, the ICRC
// verifies over the real IP header, and the ID solver finds the real ID.
func TestGoldenCaptures(t *testing.T) {
	seen := map[wire.Opcode]int{}
	for _, file := range captureFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			pkts := readRoCE(t, file)
			if len(pkts) == 0 {
				t.Fatal("no RoCEv2 packets")
			}
			for _, rp := range pkts {
				var p wire.Packet
				if err := p.Parse(rp.udp); err != nil {
					t.Fatalf("frame %d: Parse: %v", rp.frame, err)
				}
				seen[p.BTH.Opcode]++
				hdr := p.AppendHeaders(nil)
				n := len(rp.udp) - wire.ICRCLen - int(p.BTH.PadCnt) - len(p.Payload)
				if string(hdr) != string(rp.udp[:n]) {
					t.Errorf("frame %d %v: headers re-encode\n got %x\nwant %x", rp.frame, p.BTH.Opcode, hdr, rp.udp[:n])
				}
				p2 := p
				p2.Payload = append([]byte(nil), p.Payload...)
				enc := p2.Append(nil)
				wire.PutICRC(enc, p.ICRC)
				if string(enc) != string(rp.udp) {
					t.Errorf("frame %d %v: packet re-encode differs", rp.frame, p.BTH.Opcode)
				}
				if !wire.VerifyICRC(rp.ip, rp.sport, rp.dport, rp.udp) {
					t.Errorf("frame %d %v: bad ICRC", rp.frame, p.BTH.Opcode)
				}
				var src, dst netip.Addr
				if rp.ip[0]>>4 == 4 {
					src, dst = netip.AddrFrom4([4]byte(rp.ip[12:16])), netip.AddrFrom4([4]byte(rp.ip[16:20]))
				} else {
					src, dst = netip.AddrFrom16([16]byte(rp.ip[8:24])), netip.AddrFrom16([16]byte(rp.ip[24:40]))
				}
				id, ok := wire.VerifyICRCAddrs(netip.AddrPortFrom(src, rp.sport), netip.AddrPortFrom(dst, rp.dport), rp.udp)
				if !ok {
					t.Errorf("frame %d: wire.VerifyICRCAddrs failed", rp.frame)
				} else if src.Is4() && id != binary.BigEndian.Uint16(rp.ip[4:]) {
					t.Errorf("frame %d: solved ID %d, real %d", rp.frame, id, binary.BigEndian.Uint16(rp.ip[4:]))
				}
				// A single flipped payload/header bit must fail both checks.
				bad := append([]byte(nil), rp.udp...)
				bad[len(bad)/2] ^= 0x01
				if wire.VerifyICRC(rp.ip, rp.sport, rp.dport, bad) {
					t.Errorf("frame %d: corrupted packet passes full ICRC", rp.frame)
				}
			}
		})
	}
	// The captures cover these opcodes; make sure the suite really saw them.
	for _, op := range []wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly, wire.RCAcknowledge,
		wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly, wire.RCReadRequest, wire.RCReadResponseFirst,
		wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly, wire.RCCompareSwap, wire.RCFetchAdd,
		wire.RCAtomicAcknowledge, wire.UCSendFirst, wire.UCSendLast, wire.UDSendOnly, wire.UDSendOnlyImm} {
		if seen[op] == 0 {
			t.Errorf("captures had no %v packet", op)
		}
	}
	t.Logf("opcodes seen: %v", seen)
}
