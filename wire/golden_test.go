package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// capturesDir holds pcaps of real kernel rxe traffic (copied from ../shared/captures).
const capturesDir = "../testdata/captures"

type rocePkt struct {
	frame int
	ip    []byte // IP header as on the wire
	sport uint16
	dport uint16
	udp   []byte // UDP payload: BTH .. ICRC
}

// readRoCE returns the RoCEv2 (UDP 4791) packets of an Ethernet pcap.
func readRoCE(t testing.TB, path string) []rocePkt {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("%s: link type %v, want Ethernet", path, r.LinkType())
	}
	var out []rocePkt
	for i := 1; ; i++ {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 14 {
			continue
		}
		et, l3 := binary.BigEndian.Uint16(data[12:]), data[14:]
		var ip, l4 []byte
		switch {
		case et == 0x0800 && len(l3) >= 20 && l3[9] == 17:
			ihl := int(l3[0]&0xF) * 4
			tot := int(binary.BigEndian.Uint16(l3[2:]))
			if tot > len(l3) {
				t.Fatalf("%s frame %d: truncated", path, i)
			}
			ip, l4 = l3[:ihl], l3[ihl:tot]
		case et == 0x86DD && len(l3) >= 40 && l3[6] == 17:
			ip, l4 = l3[:40], l3[40:40+int(binary.BigEndian.Uint16(l3[4:]))]
		default:
			continue
		}
		if len(l4) < 8 || binary.BigEndian.Uint16(l4[2:]) != UDPPort {
			continue
		}
		ulen := int(binary.BigEndian.Uint16(l4[4:]))
		out = append(out, rocePkt{i, ip, binary.BigEndian.Uint16(l4), UDPPort, l4[8:ulen]})
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

// TestGoldenCaptures checks every RoCEv2 packet rxe sent in the captures:
// it parses, re-encoding the parsed headers gives the same bytes, the ICRC
// verifies over the real IP header, and the ID solver finds the real ID.
func TestGoldenCaptures(t *testing.T) {
	seen := map[Opcode]int{}
	for _, file := range captureFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			pkts := readRoCE(t, file)
			if len(pkts) == 0 {
				t.Fatal("no RoCEv2 packets")
			}
			for _, rp := range pkts {
				var p Packet
				if err := p.Parse(rp.udp); err != nil {
					t.Fatalf("frame %d: Parse: %v", rp.frame, err)
				}
				seen[p.BTH.Opcode]++
				hdr := p.AppendHeaders(nil)
				n := len(rp.udp) - ICRCLen - int(p.BTH.PadCnt) - len(p.Payload)
				if string(hdr) != string(rp.udp[:n]) {
					t.Errorf("frame %d %v: headers re-encode\n got %x\nwant %x", rp.frame, p.BTH.Opcode, hdr, rp.udp[:n])
				}
				p2 := p
				p2.Payload = append([]byte(nil), p.Payload...)
				enc := p2.Append(nil)
				PutICRC(enc, p.ICRC)
				if string(enc) != string(rp.udp) {
					t.Errorf("frame %d %v: packet re-encode differs", rp.frame, p.BTH.Opcode)
				}
				if !VerifyICRC(rp.ip, rp.sport, rp.dport, rp.udp) {
					t.Errorf("frame %d %v: bad ICRC", rp.frame, p.BTH.Opcode)
				}
				var src, dst netip.Addr
				if rp.ip[0]>>4 == 4 {
					src, dst = netip.AddrFrom4([4]byte(rp.ip[12:16])), netip.AddrFrom4([4]byte(rp.ip[16:20]))
				} else {
					src, dst = netip.AddrFrom16([16]byte(rp.ip[8:24])), netip.AddrFrom16([16]byte(rp.ip[24:40]))
				}
				id, ok := VerifyICRCAddrs(netip.AddrPortFrom(src, rp.sport), netip.AddrPortFrom(dst, rp.dport), rp.udp)
				if !ok {
					t.Errorf("frame %d: VerifyICRCAddrs failed", rp.frame)
				} else if src.Is4() && id != binary.BigEndian.Uint16(rp.ip[4:]) {
					t.Errorf("frame %d: solved ID %d, real %d", rp.frame, id, binary.BigEndian.Uint16(rp.ip[4:]))
				}
				// A single flipped payload/header bit must fail both checks.
				bad := append([]byte(nil), rp.udp...)
				bad[len(bad)/2] ^= 0x01
				if VerifyICRC(rp.ip, rp.sport, rp.dport, bad) {
					t.Errorf("frame %d: corrupted packet passes full ICRC", rp.frame)
				}
			}
		})
	}
	// The captures cover these opcodes; make sure the suite really saw them.
	for _, op := range []Opcode{RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly, RCAcknowledge,
		RCWriteFirst, RCWriteMiddle, RCWriteLast, RCWriteOnly, RCReadRequest, RCReadResponseFirst,
		RCReadResponseMiddle, RCReadResponseLast, RCReadResponseOnly, RCCompareSwap, RCFetchAdd,
		RCAtomicAcknowledge, UCSendFirst, UCSendLast, UDSendOnly, UDSendOnlyImm} {
		if seen[op] == 0 {
			t.Errorf("captures had no %v packet", op)
		}
	}
	t.Logf("opcodes seen: %v", seen)
}
