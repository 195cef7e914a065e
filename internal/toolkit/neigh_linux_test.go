package toolkit

import (
	"net"
	"net/netip"
	"testing"
)

// TestOnLink: an address of this host is local even when another address's
// subnet, listed first, contains it (10.88.0.2 beside 10.88.0.1/24: a dead
// peer's address added for a test must resolve at once, as the kernel's
// rdma_resolve_addr does, not wait for an ARP answer that never comes); a
// neighbour in a subnet is on-link; other addresses are not.
func TestOnLink(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	addrs := []net.Addr{cidr("127.0.0.1/8"), cidr("10.88.0.1/24"), cidr("10.88.0.2/24")}
	for _, c := range []struct {
		dst  string
		want bool
	}{{"10.88.0.2", false}, {"10.88.0.1", false}, {"10.88.0.99", true}, {"10.89.0.1", false}} {
		if got := onLink(netip.MustParseAddr(c.dst), addrs); got != c.want {
			t.Errorf("onLink(%s) = %v, want %v", c.dst, got, c.want)
		}
	}
}
