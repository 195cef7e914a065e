package toolkit

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/softroce/softroce/verbs"
)

// LibraryDevice is one device of the C library's list (capi): what a
// program linked against softroce's libibverbs sees as ibv_device i.
type LibraryDevice struct {
	Device
	// Auto marks the loopback device of a host with no links: each
	// process binds the first 127.0.0.x whose UDP port 4791 is free, so
	// Addr is only the first candidate.
	Auto bool
	// Spare are the netdev's other addresses, for a device named by its
	// netdev: a process that finds UDP port 4791 taken on Addr (another
	// process has the device) binds the first free one of these instead,
	// so that several processes on one host each open the device with
	// nothing to configure per process.
	Spare []netip.Addr
}

// LibraryDevices lists the devices the C library offers: the one device
// named by envDevice (SOFTROCE_DEVICE, softroce exec -d) when set; else every
// link of the state file (a link that does not resolve is left out and
// reported in skipped); else one loopback device, "lo".
func LibraryDevices(envDevice string) (devs []LibraryDevice, skipped []error, err error) {
	if envDevice != "" {
		d, err := ResolveDevice(envDevice)
		if err != nil {
			return nil, nil, err
		}
		ld := LibraryDevice{Device: d}
		if d.Name == envDevice && d.Netdev == envDevice {
			// A netdev no link is on: its other addresses are spares.
			if host, err := HostInterfaces(); err == nil {
				if ifc := IfaceByName(host, d.Netdev); ifc != nil {
					ld.Spare = spareAddrs(ifc, d.Addr.Addr())
				}
			}
		}
		return []LibraryDevice{ld}, nil, nil
	}
	st, err := LoadState()
	if err != nil || len(st.Links) == 0 {
		d, _ := ResolveIn("", nil, nil)
		d.Name = "lo"
		return []LibraryDevice{{Device: d, Auto: true}}, nil, nil
	}
	for i := range st.Links {
		d, err := ResolveDevice(st.Links[i].Name)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("link %s: %w", st.Links[i].Name, err))
			continue
		}
		devs = append(devs, LibraryDevice{Device: d})
	}
	return devs, skipped, nil
}

// spareAddrs are ifc's addresses of first's family other than first
// (IPv6 link-local ones left out), in the interface's order.
func spareAddrs(ifc *HostIface, first netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range ifc.Addrs {
		if a != first && a.Is4() == first.Is4() && !a.IsLinkLocalUnicast() {
			out = append(out, a)
		}
	}
	return out
}

// IBSysfsGIDs is how many GID entries the sysfs view describes: a softroce
// device has two, the link-local GID made from its MAC and its address.
const IBSysfsGIDs = 2

// IBSysfsFiles is what /sys/class/infiniband/NAME holds for device d,
// as rdma_rxe's files read, by path below that directory. Programs that
// read sysfs rather than ask libibverbs (UCX reads the GID types and the
// netdev behind each GID) find their answers here.
func IBSysfsFiles(d LibraryDevice) map[string]string {
	guid := GUIDString(verbs.NodeGUIDFor(d.Addr.Addr(), DeviceMAC(d.Netdev)))
	f := map[string]string{
		"node_type":              "1: CA",
		"node_guid":              guid,
		"sys_image_guid":         guid,
		"fw_ver":                 "0.0.0",
		"node_desc":              "softroce " + d.Name,
		"ports/1/state":          "4: ACTIVE",
		"ports/1/phys_state":     "5: LinkUp",
		"ports/1/link_layer":     "Ethernet",
		"ports/1/lid":            "0x0",
		"ports/1/sm_lid":         "0x0",
		"ports/1/lid_mask_count": "0",
		"ports/1/pkeys/0":        "0xffff",
	}
	netdev := d.Netdev
	if netdev == "" && d.Auto {
		netdev = "lo" // the automatic device is on loopback
	}
	for i := 0; i < IBSysfsGIDs; i++ {
		f[fmt.Sprintf("ports/1/gid_attrs/types/%d", i)] = "RoCE v2"
		if netdev != "" {
			f[fmt.Sprintf("ports/1/gid_attrs/ndevs/%d", i)] = netdev
		}
	}
	if !d.Auto && len(d.Spare) == 0 && d.Addr.Addr().IsValid() {
		f["ports/1/gids/1"] = gidString(verbs.GIDFromAddr(d.Addr.Addr()))
	}
	return f
}

// GUIDString formats a GUID as sysfs does: four groups of four hex digits.
func GUIDString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// gidString formats a GID as sysfs does: eight groups of four hex digits.
func gidString(g verbs.GID) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}
