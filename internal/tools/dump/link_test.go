package dump

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/toolkit"
)

// dlRun runs the softroce command line in-process.
func dlRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

func TestLinkCommand(t *testing.T) {
	t.Setenv(toolkit.StateEnv, filepath.Join(t.TempDir(), "links.json"))
	saved := toolkit.HostInterfaces
	t.Cleanup(func() { toolkit.HostInterfaces = saved })
	toolkit.HostInterfaces = func() ([]toolkit.HostIface, error) { return toolkit.FakeHost(), nil }

	steps := []struct {
		args        string
		code        int
		out, errHas string
	}{
		{"link", 0, "", ""},
		{"link show", 0, "", ""},
		{"link add rxe0 type rxe netdev eth0", 0, "", ""},
		{"link add rxe0 netdev lo", 1, "", "link rxe0 already exists (netdev eth0); delete it first"},
		{"link add x netdev eth9", 1, "", `no netdev "eth9" (netdevs: eth0, eth1, eth2, lo)`},
		{"link add sr1 addr 10.0.0.2:5000 sport qp", 0, "", ""},
		{"link add bad addr 10.0.0.3 sport flow", 2, "", `sport "flow": want 'qp'`},
		{"link add far addr 192.0.2.1", 0, "", "warning: 192.0.2.1 is not an address of this host"},
		{"link add dup netdev eth0", 1, "", "netdev eth0 already has link rxe0"},
		{"link add dup addr 10.0.0.2:5000", 1, "", "link sr1 already uses 10.0.0.2:5000"},
		{"link add dup addr 10.0.0.1", 1, "", "link rxe0 already uses 10.0.0.1:4791"},
		{"link add bad type ib netdev eth0", 2, "", `type "ib" is not supported`},
		{"link add bad netdev eth0 addr 127.0.0.1", 1, "", "127.0.0.1 is on lo, not on netdev eth0"},
		{"link add bad addr 0.0.0.0", 2, "", "0.0.0.0 cannot be a device address"},
		{"link add bad addr eth0", 2, "", `"eth0" is not an IP address`},
		{"link add bad/name netdev lo", 2, "", "bad link name"},
		{"link add bad netdev", 2, "", `"netdev" needs a value`},
		{"link add bad", 2, "", "add needs a NAME and netdev DEV"},
		{"link add nc netdev eth2", 0, "", "warning: netdev eth2 has no IP address yet"},
		{"link add down6 netdev eth1", 0, "", ""},
		{"link show", 0, `link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 addr 10.0.0.1:4791
link sr1/1 state ACTIVE physical_state LINK_UP netdev eth0 addr 10.0.0.2:5000 sport qp
link far/1 state DOWN physical_state DISABLED addr 192.0.2.1:4791 (address not on this host)
link nc/1 state DOWN physical_state DISABLED netdev eth2 (no IP address)
link down6/1 state DOWN physical_state DISABLED netdev eth1 addr [fe80::2%eth1]:4791 (netdev eth1 is down)
`, ""},
		{"link show sr1", 0, "link sr1/1 state ACTIVE physical_state LINK_UP netdev eth0 addr 10.0.0.2:5000 sport qp\n", ""},
		{"link show nope", 1, "", `no link "nope" (links: rxe0 (netdev eth0), sr1 (addr 10.0.0.2:5000 sport qp)`},
		{"link delete far", 0, "", ""},
		{"link del far", 1, "", `no link "far"`},
		{"link frob", 2, "", `unknown subcommand "frob"`},
	}
	for _, s := range steps {
		out, errOut, code := dlRun(t, strings.Fields(s.args)...)
		if code != s.code || out != s.out || !strings.Contains(errOut, s.errHas) {
			t.Errorf("softroce %s: exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr containing %q",
				s.args, code, out, errOut, s.code, s.out, s.errHas)
		}
	}
	out, _, _ := dlRun(t, "link", "-j", "show", "rxe0")
	var js []linkStatus
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 || js[0].State != "ACTIVE" || js[0].Netdev != "eth0" {
		t.Errorf("link -j: %q %v", out, err)
	}
	// -d resolution sees the links the command saved.
	d, err := toolkit.ResolveDevice("sr1")
	if err != nil || d.Addr.String() != "10.0.0.2:5000" || !d.QPPorts {
		t.Errorf("ResolveDevice(sr1) = %+v, %v", d, err)
	}
}
