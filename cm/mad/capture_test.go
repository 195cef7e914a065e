package mad

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// roceFrame is one RoCEv2 packet from a capture.
type roceFrame struct {
	index    int
	src, dst netip.Addr
	udp      []byte // UDP payload: BTH .. ICRC
	pkt      wire.Packet
}

// reducedCaptures are the captures cut down to a subset of their frames
// (see testdata/README.md), kept in testdata; the others are read unchanged
// from the repository's testdata/captures.
var reducedCaptures = map[string]bool{"write_bw_rdmacm.pcap": true}

// capturePath returns the file of the capture called name.
func capturePath(name string) string {
	if reducedCaptures[name] {
		return filepath.Join("testdata", name)
	}
	return filepath.Join("..", "..", "testdata", "captures", name)
}

// readRoCE returns the RoCEv2 packets (UDP 4791 over IPv4) of a capture
// (see capturePath), parsed with wire.Packet.Parse.
func readRoCE(t testing.TB, name string) []roceFrame {
	t.Helper()
	f, err := os.Open(capturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out []roceFrame
	for _, p := range pkts {
		if !p.Src.Addr().Is4() {
			continue
		}
		i := int(p.Frame) - 1
		fr := roceFrame{index: i, src: p.Src.Addr(), dst: p.Dst.Addr(), udp: p.Payload}
		if err := fr.pkt.Parse(fr.udp); err != nil {
			t.Fatalf("%s frame %d: wire parse: %v", name, i, err)
		}
		out = append(out, fr)
	}
	return out
}

// cmMADs returns the CM MADs (UD SEND_ONLY to QP1) of a capture.
func cmMADs(t testing.TB, name string) []roceFrame {
	var out []roceFrame
	for _, f := range readRoCE(t, name) {
		if f.pkt.BTH.DestQP == 1 {
			out = append(out, f)
		}
	}
	return out
}
