package interop

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
)

// TestSportQP runs softroce on a link with 'sport qp' against the kernel's
// rxe, in both roles, over perftest's TCP exchange (write_bw) and over
// rdma_cm (rping): softroce's datagrams of each connection carry the UDP
// source port the kernel's carry (both derive it from the two QPNs or the
// flow label, docs/protocol.md §1.3; the CM's MADs from QP1's), and every
// ICRC in softroce's --pcap verifies.
func TestSportQP(t *testing.T) {
	for _, f := range []family{
		perftest("write_bw", "", 65536, 50, true),
		{name: "rping", guestBin: "rping", hostTool: "rping", args: "-V -v -C 5 -S 100",
			rdmacm: true, listen: listenCM, check: checkRping(5)},
	} {
		f.hostDev = "-d sportqp -x 1"
		t.Run(f.name, func(t *testing.T) {
			bothRoles(t, func(t *testing.T, softroceServer bool) {
				need(t, true)
				g := bootGuest(t, 0)
				t.Setenv(toolkit.StateEnv, filepath.Join(t.TempDir(), "links.json"))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if r := runCmd(hostCmd(ctx, "link", "add", "sportqp", "addr", hostIP, "sport", "qp")); r.code != 0 {
					t.Fatalf("link add: %s", r)
				}
				srv, cli := f.endpoints(g, softroceServer)
				file := filepath.Join(t.TempDir(), "sport.pcap")
				if softroceServer {
					srv.cmd += " --pcap " + file
				} else {
					cli.cmd += " --pcap " + file
				}
				f.check(t, runPair(t, srv, cli, f.listen, 120*time.Second))
				ports, n := tooltest.SourcePorts(t, file)
				mine, theirs := slices.Sorted(maps.Keys(ports[hostIP])), slices.Sorted(maps.Keys(ports[g.ip]))
				if n == 0 || len(mine) == 0 || !slices.Equal(mine, theirs) || mine[0] < 0xC000 {
					t.Errorf("%d datagrams; source ports: softroce %v, kernel %v: want the same ports, 0xC000 and up", n, ports[hostIP], ports[g.ip])
				}
				t.Logf("source ports: softroce %v, kernel %v", ports[hostIP], ports[g.ip])
			})
		})
	}
}
