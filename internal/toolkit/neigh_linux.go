package toolkit

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// NeighResolve (ResolveNeigh) is the rdma_cm tools' cm.Config.Resolve on Linux: like
// rdma_resolve_addr, it succeeds once the kernel has the on-link IPv4
// destination's hardware address (ARP), and times out with the context
// when nobody answers. To make the kernel ask, it sends one empty UDP
// datagram toward dst's discard port (9), unless the neighbour entry is
// complete already. Local, loopback, routed (off-link) and IPv6
// destinations resolve at once.
var NeighResolve = ResolveNeigh

// NeighResolved (NeighDone) is the tools' cm.Config.Resolved on Linux.
var NeighResolved = NeighDone

// NeighDone reports whether ResolveNeigh would succeed at once for dst:
// not on-link IPv4 (local, loopback, routed, IPv6), or its neighbour
// entry complete. rdma_resolve_addr then reports ADDR_RESOLVED without a
// goroutine's hand-off.
func NeighDone(src, dst netip.Addr) bool {
	return !dst.Is4() || dst.IsLoopback() || !OnLink(dst) || ArpComplete(dst)
}

// ResolveNeigh is NeighResolve on Linux: it makes the kernel resolve dst (as
// rdma_resolve_addr's ARP does) and waits until that is done or ctx ends.
func ResolveNeigh(ctx context.Context, src, dst netip.Addr) error {
	if NeighDone(src, dst) {
		return nil
	}
	var laddr *net.UDPAddr
	if src.Is4() && !src.IsLoopback() {
		laddr = &net.UDPAddr{IP: src.AsSlice()}
	}
	c, err := net.DialUDP("udp4", laddr, &net.UDPAddr{IP: dst.AsSlice(), Port: 9})
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return errno
		}
		return syscall.EHOSTUNREACH
	}
	defer c.Close()
	c.Write(nil)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !ArpComplete(dst) {
		select {
		case <-ctx.Done():
			return syscall.ETIMEDOUT
		case <-t.C:
		}
	}
	return nil
}

// OnLink reports whether dst is in the subnet of a local interface
// address (and is not that address).
func OnLink(dst netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	return onLink(dst, addrs)
}

// onLink is OnLink over the given interface addresses: a local address is
// not on-link however the subnets are listed (the kernel resolves it
// through the loopback device, without ARP).
func onLink(dst netip.Addr, addrs []net.Addr) bool {
	var prefixes []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		if ip.Unmap() == dst {
			return false // local
		}
		ones, _ := n.Mask.Size()
		prefixes = append(prefixes, netip.PrefixFrom(ip.Unmap(), ones).Masked())
	}
	for _, p := range prefixes {
		if p.Contains(dst) {
			return true
		}
	}
	return false
}

// ArpComplete reports whether /proc/net/arp has a complete entry for dst.
func ArpComplete(dst netip.Addr) bool {
	f, err := os.Open("/proc/net/arp")
	if err != nil {
		return true // cannot tell: do not fail the connection
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fl := strings.Fields(s.Text())
		// IP address, HW type, Flags, HW address, Mask, Device
		if len(fl) >= 4 && fl[0] == dst.String() && fl[2] != "0x0" && fl[3] != "00:00:00:00:00:00" {
			return true
		}
	}
	return false
}
