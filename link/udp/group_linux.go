package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
)

var _ link.GroupJoiner = (*Endpoint)(nil)

// JoinGroup joins the IP multicast group on the interface of the
// endpoint's address and returns a receive-only endpoint bound to the
// group's address and the endpoint's port, on which the group's datagrams
// arrive (link.GroupJoiner): a socket with SO_REUSEADDR, so that every
// endpoint of the host that joins gets its own copy, with the receive
// options of the endpoint's own (Packet.Dst is the group's address, TOS as
// received). Its WriteBatch fails; its Close leaves the group. No
// privilege is needed, and on loopback the interface needs no MULTICAST
// flag.
func (e *Endpoint) JoinGroup(group netip.Addr) (link.Endpoint, error) {
	if e.closed.Load() {
		return nil, errClosed
	}
	if e.group {
		return nil, errGroupSend
	}
	g := group.WithZone("")
	if !e.is6 {
		g = g.Unmap()
	}
	if !g.IsMulticast() || g.Is4() == e.is6 {
		return nil, fmt.Errorf("%w: %v (endpoint %v)", ErrNotMulticast, group, e.local)
	}
	if e.wildcard {
		return nil, fmt.Errorf("%w: %v", ErrWildcardGroup, e.local)
	}
	cfg := e.cfg
	cfg.Addr = netip.AddrPortFrom(g, e.local.Port())
	cfg.AnyPort, cfg.SendFromBound, cfg.SourcePorts, cfg.MTU = false, true, 0, e.mtu
	cfg.group = true
	if e.is6 && (g.IsLinkLocalMulticast() || g.IsInterfaceLocalMulticast()) {
		// A group of link scope is bound on the interface that joins.
		cfg.groupIf = e.scope
		if cfg.groupIf == 0 {
			cfg.groupIf = ifaceIndexOf(e.local.Addr())
		}
	}
	ge, err := Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("udp: group %v: %w", g, err)
	}
	ge.scope = e.scope
	if err := ge.join(e.local.Addr(), e.scope); err != nil {
		ge.Close()
		return nil, err
	}
	return ge, nil
}

// bindGroup opens the socket of a group endpoint and binds it to the
// group's address itself: the net package would bind a multicast address's
// port on the wildcard address, which receives every datagram to the port
// (and conflicts with the endpoint that joins, bound without
// SO_REUSEADDR).
func (e *Endpoint) bindGroup(cfg Config) error {
	dom := unix.AF_INET
	var sa unix.Sockaddr
	if e.is6 {
		dom = unix.AF_INET6
		sa = &unix.SockaddrInet6{Addr: cfg.Addr.Addr().As16(), Port: int(cfg.Addr.Port()), ZoneId: cfg.groupIf}
	} else {
		sa = &unix.SockaddrInet4{Addr: cfg.Addr.Addr().As4(), Port: int(cfg.Addr.Port())}
	}
	fd, err := unix.Socket(dom, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	if e.is6 {
		err = os.NewSyscallError("setsockopt IPV6_V6ONLY", unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1))
	}
	if err == nil {
		err = e.setOptions(fd, cfg.SocketBuffer)
	}
	if err == nil {
		err = os.NewSyscallError("bind", unix.Bind(fd, sa))
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("udp: group socket on %v: %w", cfg.Addr, err)
	}
	if err := e.adopt(fd, cfg.Netpoll); err != nil {
		return fmt.Errorf("udp: group socket on %v: %w", cfg.Addr, err)
	}
	return nil
}

// join adds the socket's membership of its (group) address on the
// interface that holds local (scope: its IPv6 zone, when it has one).
func (e *Endpoint) join(local netip.Addr, scope uint32) error {
	g := e.local.Addr()
	var serr error
	err := e.rc.Control(func(fd uintptr) {
		if !e.is6 {
			mr := unix.IPMreqn{Multiaddr: g.As4(), Address: local.As4()}
			serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &mr)
			return
		}
		ifi := scope
		if ifi == 0 {
			ifi = ifaceIndexOf(local)
		}
		mr := unix.IPv6Mreq{Multiaddr: g.As16(), Interface: ifi}
		serr = unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &mr)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: join group %v on the interface of %v: %w", g, local, err)
	}
	return nil
}

// multicastIf makes datagrams fd sends to a multicast group leave on the
// interface of the endpoint's address (IP_MULTICAST_IF, IPV6_MULTICAST_IF),
// as a UD send to a multicast GID leaves a RoCE port; the host's own
// members get a copy (multicast loop, the default). (IPv4 sends from a
// bound address leave on its interface without it; IPv6 ones go where the
// routing table's multicast route says, the first multicast-capable
// interface, without it.) Wildcard endpoints
// leave the choice to the routing table, and so does a socket the option
// is refused on (logged): unicast traffic does not need it.
func (e *Endpoint) multicastIf(fd int) {
	a := e.cfg.Addr.Addr()
	if e.wildcard || !a.IsValid() {
		return
	}
	var err error
	if !e.is6 {
		mr := unix.IPMreqn{Address: a.As4()}
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &mr)
	} else {
		if e.mcIf == 0 {
			e.mcIf = e.scope
			if e.mcIf == 0 {
				e.mcIf = ifaceIndexOf(a)
			}
		}
		ifi := e.mcIf
		if ifi == 0 {
			return // no interface holds it (yet): the routing table chooses
		}
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, int(ifi))
	}
	if err != nil && e.log != nil {
		e.log.Debug("udp: multicast sends leave where the routing table says", "addr", a, "err", err)
	}
}

// ifaceIndexOf returns the index of the interface that holds address a
// (the loopback interface for a loopback address), or 0.
func ifaceIndexOf(a netip.Addr) uint32 {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	for _, ifc := range ifs {
		if a.IsLoopback() && ifc.Flags&net.FlagLoopback != 0 {
			return uint32(ifc.Index)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a.Unmap().WithZone("") {
					return uint32(ifc.Index)
				}
			}
		}
	}
	return 0
}
