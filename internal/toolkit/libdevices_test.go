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
