package toolkit

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestIBSysfsFiles checks the sysfs view of a device: the files UCX reads
// (each GID's type and netdev), rdma_rxe's port files, and the address GID
// only where the address is known before the device opens.
func TestIBSysfsFiles(t *testing.T) {
	link := LibraryDevice{Device: Device{Name: "sr0", Addr: netip.MustParseAddrPort("10.1.2.3:4791"), Netdev: "veth0"}}
	f := IBSysfsFiles(link)
	want := map[string]string{
		"ports/1/gid_attrs/types/0": "RoCE v2",
		"ports/1/gid_attrs/types/1": "RoCE v2",
		"ports/1/gid_attrs/ndevs/0": "veth0",
		"ports/1/gid_attrs/ndevs/1": "veth0",
		"ports/1/gids/1":            "0000:0000:0000:0000:0000:ffff:0a01:0203",
		"ports/1/state":             "4: ACTIVE",
		"ports/1/link_layer":        "Ethernet",
		"node_type":                 "1: CA",
	}
	got := map[string]string{}
	for k := range want {
		got[k] = f[k]
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	if len(f["node_guid"]) != 19 || f["node_guid"] != f["sys_image_guid"] {
		t.Errorf("node_guid %q, sys_image_guid %q", f["node_guid"], f["sys_image_guid"])
	}

	auto := IBSysfsFiles(LibraryDevice{Device: Device{Name: "lo", Addr: netip.MustParseAddrPort("127.0.0.1:4791")}, Auto: true})
	if auto["ports/1/gid_attrs/ndevs/1"] != "lo" {
		t.Errorf("automatic device's netdev %q, want lo", auto["ports/1/gid_attrs/ndevs/1"])
	}
	if g, ok := auto["ports/1/gids/1"]; ok {
		t.Errorf("automatic device has a fixed address GID %q: each process picks its own", g)
	}
}

func TestGUIDString(t *testing.T) {
	if got := GUIDString(0x0123456789abcdef); got != "0123:4567:89ab:cdef" {
		t.Errorf("GUIDString = %q", got)
	}
}

// TestLibraryDevicesSpare: a device named by its netdev carries the
// netdev's other addresses of the same family as spares (several
// processes each open it, nothing configured per process); one named by
// an address has none.
func TestLibraryDevicesSpare(t *testing.T) {
	t.Setenv(StateEnv, t.TempDir()+"/none.json")
	old := HostInterfaces
	t.Cleanup(func() { HostInterfaces = old })
	HostInterfaces = func() ([]HostIface, error) {
		return []HostIface{{Name: "veth9", Up: true, Running: true, Addrs: []netip.Addr{
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1"),
			netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("10.0.0.5"),
		}}}, nil
	}
	devs, _, err := LibraryDevices("veth9")
	if err != nil || len(devs) != 1 {
		t.Fatalf("LibraryDevices(veth9) = %v, %v", devs, err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.5")}
	if devs[0].Addr.Addr() != netip.MustParseAddr("10.0.0.1") || !cmp.Equal(devs[0].Spare, want, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("device %v spare %v, want 10.0.0.1 and %v", devs[0].Addr, devs[0].Spare, want)
	}
	if _, ok := IBSysfsFiles(devs[0])["ports/1/gids/1"]; ok {
		t.Errorf("a device with spares has a fixed address GID in sysfs")
	}
	devs, _, err = LibraryDevices("10.0.0.3")
	if err != nil || len(devs) != 1 || len(devs[0].Spare) != 0 {
		t.Errorf("LibraryDevices(10.0.0.3) = %+v, %v; want one device, no spares", devs, err)
	}
	devs, _, err = LibraryDevices("")
	if err != nil || len(devs) != 1 || !devs[0].Auto || devs[0].Name != "lo" {
		t.Errorf("LibraryDevices() with no links = %+v, %v; want the automatic lo", devs, err)
	}
}
