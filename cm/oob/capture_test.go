package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	pcap "github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

var (
	clientIP = netip.MustParseAddr("10.77.0.12")
	serverIP = netip.MustParseAddr("10.77.0.11")
)

// turn is a run of TCP payload sent by one side before the other answers.
type turn struct {
	fromClient bool
	data       []byte
}

// capture holds the TCP side channel and the RoCE packets of a pcap.
type capture struct {
	turns []turn
	roce  []roceFrame
}

type roceFrame struct {
	src netip.Addr
	pkt wire.Packet
}

// fullCaptures are read unchanged from the repository's testdata/captures;
// the others are cut down to a subset of their frames and kept in testdata
// (see testdata/README.md).
var fullCaptures = map[string]bool{"rping.pcap": true, "srq_pingpong.pcap": true}

// capturePath returns the file of the capture called name.
func capturePath(name string) string {
	if fullCaptures[name] {
		return filepath.Join("..", "..", "testdata", "captures", name)
	}
	return filepath.Join("testdata", name)
}

func readCapture(t testing.TB, name string) capture {
	t.Helper()
	f, err := os.Open(capturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var c capture
	for {
		var fr pcap.Frame
		err := r.NextFrame(&fr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var p pcap.Packet
		if pcap.ParseFrame(fr.LinkType, fr.Data, &p) {
			if p.Dst.Port() != wire.UDPPort {
				continue
			}
			rf := roceFrame{src: p.Src.Addr()}
			if err := rf.pkt.Parse(bytes.Clone(p.Payload)); err != nil {
				t.Fatal(err)
			}
			c.roce = append(c.roce, rf)
			continue
		}
		c.addTCP(fr.Data)
	}
	return c
}

// addTCP adds the payload of an Ethernet/IPv4 TCP frame to the turns (the
// captures have no retransmissions or reordering); capture.Reader finds
// only UDP, so TCP is taken apart here.
func (c *capture) addTCP(data []byte) {
	if len(data) < 34 || binary.BigEndian.Uint16(data[12:]) != 0x0800 {
		return
	}
	ip := data[14:]
	ihl := int(ip[0]&15) * 4
	if ip[9] != 6 {
		return
	}
	l4 := ip[ihl:binary.BigEndian.Uint16(ip[2:])]
	pl := l4[int(l4[12]>>4)*4:]
	if len(pl) == 0 {
		return
	}
	fc := netip.AddrFrom4([4]byte(ip[12:16])) == clientIP
	if n := len(c.turns); n > 0 && c.turns[n-1].fromClient == fc {
		c.turns[n-1].data = append(c.turns[n-1].data, pl...)
	} else {
		c.turns = append(c.turns, turn{fc, append([]byte(nil), pl...)})
	}
}

// firstPSN returns the PSN and destination QP of the first request packet
// sent by src.
func (c *capture) firstRequest(src netip.Addr) (qpn, psn uint32, ok bool) {
	for _, f := range c.roce {
		if f.src == src && f.pkt.Mask&wire.IsRequest != 0 {
			return f.pkt.BTH.DestQP, f.pkt.BTH.PSN, true
		}
	}
	return 0, 0, false
}

// stream returns everything one side sent, concatenated.
func (c *capture) stream(fromClient bool) []byte {
	var b []byte
	for _, t := range c.turns {
		if t.fromClient == fromClient {
			b = append(b, t.data...)
		}
	}
	return b
}
