package toolkit

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestResolveDevice(t *testing.T) {
	host := FakeHost()
	ap := netip.MustParseAddrPort
	one := []LinkEntry{{Name: "rxe0", Netdev: "eth0"}}
	many := []LinkEntry{
		{Name: "rxe0", Netdev: "eth0"},
		{Name: "sr1", Addr: "10.0.0.2:5000"},
		{Name: "sr6", Addr: "fd00::1"},
		{Name: "v6ll", Netdev: "eth1"},
		{Name: "gone", Netdev: "eth9"},
		{Name: "lo2", Addr: "127.0.0.1:4792"},
		{Name: "lo3", Addr: "127.0.0.1:4793"},
		{Name: "ll", Addr: "fe80::1"},
	}
	tests := []struct {
		name    string
		links   []LinkEntry
		arg     string
		want    Device
		wantErr error
		errHas  []string
	}{
		{"no links, no -d: loopback", nil, "", Device{"lo", ap("127.0.0.1:4791"), "lo", false}, nil, nil},
		{"one link, no -d", one, "", Device{"rxe0", ap("10.0.0.1:4791"), "eth0", false}, nil, nil},
		{"several links, no -d", many, "", Device{}, ErrAmbiguousDevice, []string{"rxe0 (netdev eth0)", "sr1 (addr 10.0.0.2:5000)"}},
		{"link with sport qp", []LinkEntry{{Name: "ecmp", Netdev: "eth0", Sport: SportQP}}, "ecmp", Device{"ecmp", ap("10.0.0.1:4791"), "eth0", true}, nil, nil},
		{"link name", many, "sr1", Device{"sr1", ap("10.0.0.2:5000"), "eth0", false}, nil, nil},
		{"link ipv6", many, "sr6", Device{"sr6", ap("[fd00::1]:4791"), "eth0", false}, nil, nil},
		{"link on link-local only netdev", many, "v6ll", Device{"v6ll", ap("[fe80::2%eth1]:4791"), "eth1", false}, nil, nil},
		{"link-local addr gets its zone", many, "ll", Device{"ll", ap("[fe80::1%eth0]:4791"), "eth0", false}, nil, nil},
		{"link with missing netdev", many, "gone", Device{}, ErrNoDevice, []string{"eth9 no longer exists", "link delete gone"}},
		{"netdev with one link", many, "eth0", Device{}, ErrAmbiguousDevice, []string{"rxe0", "sr1", "sr6"}},
		{"netdev with its link", one, "eth0", Device{"rxe0", ap("10.0.0.1:4791"), "eth0", false}, nil, nil},
		{"netdev without link", one, "lo", Device{"lo", ap("127.0.0.1:4791"), "lo", false}, nil, nil},
		{"netdev without address", nil, "eth2", Device{}, ErrNoDevice, []string{"eth2 has no IP address"}},
		{"IP of a link", many, "10.0.0.2", Device{"sr1", ap("10.0.0.2:5000"), "eth0", false}, nil, nil},
		{"IP:port of a link", many, "10.0.0.2:5000", Device{"sr1", ap("10.0.0.2:5000"), "eth0", false}, nil, nil},
		{"IP of a netdev link", many, "10.0.0.1", Device{"rxe0", ap("10.0.0.1:4791"), "eth0", false}, nil, nil},
		{"IP shared by two links", many, "127.0.0.1", Device{}, ErrAmbiguousDevice, []string{"lo2", "lo3"}},
		{"any 127/8 address is on lo", nil, "127.0.0.2", Device{"127.0.0.2", ap("127.0.0.2:4791"), "lo", false}, nil, nil},
		{"IP:port picks one", many, "127.0.0.1:4793", Device{"lo3", ap("127.0.0.1:4793"), "lo", false}, nil, nil},
		{"local IP without link", nil, "10.0.0.2", Device{"10.0.0.2", ap("10.0.0.2:4791"), "eth0", false}, nil, nil},
		{"local IP:port without link", nil, "[::1]:6000", Device{"::1", ap("[::1]:6000"), "lo", false}, nil, nil},
		{"link-local IP gets its zone", nil, "fe80::1", Device{"fe80::1", ap("[fe80::1%eth0]:4791"), "eth0", false}, nil, nil},
		{"foreign IP", nil, "192.0.2.1", Device{}, ErrNoDevice, []string{"not an address of this host", "10.0.0.1 on eth0"}},
		{"unknown name", many, "mlx5_0", Device{}, ErrNoDevice, []string{`"mlx5_0"`, "links: rxe0", "netdevs: eth0, eth1, eth2, lo"}},
		{"unknown name, no links", nil, "rxe0", Device{}, ErrNoDevice, []string{"no links: add one with 'softroce link add"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveIn(tc.arg, tc.links, host)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestStatePath(t *testing.T) {
	t.Setenv(StateEnv, "/x/links.json")
	if p, _ := StatePath(); p != "/x/links.json" {
		t.Errorf("SOFTROCE_STATE: %s", p)
	}
	t.Setenv(StateEnv, "")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	if p, _ := StatePath(); p != filepath.Join("/xdg", "softroce", "links.json") {
		t.Errorf("XDG: %s", p)
	}
	t.Setenv("XDG_STATE_HOME", "relative") // ignored, as the XDG spec says
	t.Setenv("HOME", "/home/u")
	if p, _ := StatePath(); p != filepath.Join("/home/u", ".local", "state", "softroce", "links.json") {
		t.Errorf("HOME: %s", p)
	}
}

func TestStateSaveLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "links.json")
	t.Setenv(StateEnv, p)
	st, err := LoadState()
	if err != nil || len(st.Links) != 0 {
		t.Fatalf("missing file: %v %v", st, err)
	}
	st.Links = []LinkEntry{{Name: "a", Netdev: "lo"}, {Name: "b", Addr: "127.0.0.1:5000"}}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	st2, err := LoadState()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st.Links, st2.Links); diff != "" {
		t.Error(diff)
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt file: %v", err)
	}
}

func TestParseDeviceAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":       "10.0.0.1:4791",
		"10.0.0.1:5000":  "10.0.0.1:5000",
		"fd00::1":        "[fd00::1]:4791",
		"[fd00::1]":      "[fd00::1]:4791",
		"[fd00::1]:6000": "[fd00::1]:6000",
	} {
		got, err := ParseDeviceAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("%s: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "eth0", "10.0.0.1:0", "10.0.0.1:99999", "300.1.1.1"} {
		if _, err := ParseDeviceAddr(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
