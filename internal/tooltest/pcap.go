package tooltest

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// SourcePorts reads the RoCEv2 datagrams of pcap file and returns the UDP
// source ports each sender's IP address used (with the count of datagrams
// from each) and the number of datagrams; a datagram whose ICRC does not
// verify for the addresses and ports it carries fails the test.
func SourcePorts(t *testing.T, file string) (map[string]map[uint16]int, int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]map[uint16]int{}
	var p capture.Packet
	n := 0
	for {
		if err := r.Next(&p); errors.Is(err, io.EOF) {
			return ports, n
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		if _, ok := wire.VerifyICRCAddrs(p.Src, p.Dst, p.Payload); !ok {
			t.Errorf("%s: frame %d from %v: ICRC does not verify", file, p.Frame, p.Src)
		}
		who := p.Src.Addr().String()
		if ports[who] == nil {
			ports[who] = map[uint16]int{}
		}
		ports[who][p.Src.Port()]++
	}
}

// AddLinks adds each link (name, address) with 'sport qp' to the state
// file env names (Env), running the softroce binary bin.
func AddLinks(t *testing.T, bin string, env []string, links ...[2]string) {
	t.Helper()
	for _, l := range links {
		cmd := exec.Command(bin, "link", "add", l[0], "addr", l[1], "sport", "qp")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("link add %s: %v\n%s", l[0], err, out)
		}
	}
}
