package devinfo

import (
	"bytes"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/toolkit"
)

// shape reduces an ibv_devinfo line to its layout: the leading tabs, the
// field name and the tabs after the colon (values differ between devices).
var devinfoShapeRE = regexp.MustCompile(`^(\t*[^\t:]*:?\t*)`)

func devinfoShape(l string) string {
	if m := devinfoShapeRE.FindString(l); m != "" {
		return m
	}
	return l
}

// TestDevinfoLayoutMatchesRxe prints "devinfo -v" for a loopback device and
// checks that every line has the field name and tab layout of rdma-core's
// ibv_devinfo -v over kernel rxe (testdata/devinfo_rxe_v.txt), in the same
// order. device_cap_flags names are compared separately since softroce
// reports its own capability bits.
func TestDevinfoLayoutMatchesRxe(t *testing.T) {
	wantB, err := os.ReadFile("testdata/devinfo_rxe_v.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	d := toolkit.Device{Name: "rxe0", Addr: netip.MustParseAddrPort("10.77.0.11:4791")}
	if err := printDevinfo(&got, d, 0, true); err != nil {
		t.Fatal(err)
	}
	isFlag := func(l string) bool { return strings.HasPrefix(l, "\t\t\t\t\t") && !strings.Contains(l, "SUPPORT") }
	filter := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !isFlag(l) {
				out = append(out, devinfoShape(l))
			}
		}
		return out
	}
	want, have := filter(string(wantB)), filter(got.String())
	if len(want) != len(have) {
		t.Errorf("%d lines, rxe prints %d:\n%s", len(have), len(want), got.String())
	}
	for i := range min(len(want), len(have)) {
		if want[i] != have[i] {
			t.Errorf("line %d: layout %q, rxe's is %q", i+1, have[i], want[i])
		}
	}
	// Values that are the same on every rxe device.
	for _, l := range []string{"hca_id:\trxe0\n", "\ttransport:\t\t\tInfiniBand (0)\n", "\tvendor_id:\t\t\t0xffffff\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tmax_mtu:\t\t4096 (5)\n", "\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n", "\t\t\tGID[  1]:\t\t::ffff:10.77.0.11, RoCE v2\n", "\tphys_port_cnt:\t\t\t1\n"} {
		if !strings.Contains(got.String(), l) {
			t.Errorf("devinfo -v lacks %q", l)
		}
	}
}

func TestDevinfoCommand(t *testing.T) {
	t.Setenv(toolkit.StateEnv, t.TempDir()+"/links.json")
	for _, tc := range []struct {
		args []string
		code int
		out  string // substring of stdout
		err  string // substring of stderr
	}{
		{[]string{"-d", "127.0.0.1"}, 0, "hca_id:\t127.0.0.1\n\ttransport:\t\t\tInfiniBand (0)\n", ""},
		{[]string{"-d", "127.0.0.1", "-i", "1"}, 0, "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", ""},
		{[]string{"-d", "127.0.0.1", "-i", "2"}, 1, "", "no port 2"},
		{[]string{"-d", "127.0.0.1", "-v"}, 0, "\t\t\tGID[  1]:\t\t::ffff:127.0.0.1, RoCE v2\n", ""},
		{[]string{"-l"}, 0, "1 HCA found:\n\t", ""},
		{[]string{"-d", "no-such-dev"}, 1, "", "no such device"},
		{[]string{"extra"}, 2, "", "unexpected argument"},
		{[]string{"-i", "0"}, 2, "", "option -i/--ib-port: 0 is out of range (1..255)"},
		{[]string{"-l"}, 0, "1 HCA found:\n\trxe7\n\n", ""}, // after "link add rxe7 netdev lo" below
		{[]string{}, 0, "hca_id:\trxe7\n", ""},
		{[]string{"-d", "rxe7"}, 0, "hca_id:\trxe7\n", ""},
	} {
		if len(tc.args) > 0 && tc.args[0] == "-l" && strings.Contains(tc.out, "rxe7") {
			var o, e bytes.Buffer
			if code := run([]string{"link", "add", "rxe7", "netdev", "lo"}, &o, &e); code != 0 {
				t.Fatalf("link add: %d %s", code, e.String())
			}
		}
		var o, e bytes.Buffer
		code := run(append([]string{"devinfo"}, tc.args...), &o, &e)
		if code != tc.code || !strings.Contains(o.String(), tc.out) || !strings.Contains(e.String(), tc.err) {
			t.Errorf("devinfo %q: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", tc.args, code, o.String(), e.String(), tc.code, tc.out, tc.err)
		}
	}
}
