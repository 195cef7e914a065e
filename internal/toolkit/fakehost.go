package toolkit

import "net/netip"

// FakeHost is, for tests, a host with loopback, two Ethernet netdevs (one down, one
// without addresses) and IPv6.
func FakeHost() []HostIface {
	a := netip.MustParseAddr
	return []HostIface{
		{Name: "lo", Up: true, Running: true, Loopback: true, Addrs: []netip.Addr{a("127.0.0.1"), a("::1")}},
		{Name: "eth0", Up: true, Running: true, Addrs: []netip.Addr{a("fe80::1").WithZone("eth0"), a("10.0.0.1"), a("10.0.0.2"), a("fd00::1")}},
		{Name: "eth1", Up: false, Addrs: []netip.Addr{a("fe80::2").WithZone("eth1")}},
		{Name: "eth2", Up: true, Running: false},
	}
}
