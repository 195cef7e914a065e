package verbs

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// MTU is the InfiniBand path MTU enumeration (ibv_mtu).
type MTU = wire.MTU

// Path MTUs (enum ibv_mtu values).
const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// OpenUDP opens a device on a UDP socket bound to addr ("127.0.0.1:4791";
// without a port, 4791; port 0 lets the kernel choose).
func OpenUDP(addr string, cfg *Config) (*Device, error) {
	ap, err := netip.ParseAddrPort(addr)
	var opts []udp.Option
	if err != nil {
		a, err2 := netip.ParseAddr(addr)
		if err2 != nil {
			return nil, fmt.Errorf("verbs: open %q: want IP or IP:port: %w", addr, err)
		}
		ap = netip.AddrPortFrom(a, wire.UDPPort)
	} else if ap.Port() == 0 {
		opts = append(opts, udp.WithAnyPort())
	}
	ep, err := udp.Listen(ap, opts...)
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MAC == ([6]byte{}) {
		// GID 0 is the link-local GID of the interface's MAC, as on rxe.
		c.MAC = macOf(ap.Addr())
	}
	d, err := Open(ep, &c)
	if err != nil {
		ep.Close()
		return nil, err
	}
	return d, nil
}

// OpenPipe opens two devices joined by an in-memory link (link/pipe) with
// the given configurations (zero values: 10.0.0.1 and 10.0.0.2, MTU 1500).
func OpenPipe(a, b pipe.Config) (*Device, *Device, error) {
	ea, eb, err := pipe.New(a, b)
	if err != nil {
		return nil, nil, err
	}
	da, err := Open(ea, nil)
	if err != nil {
		ea.Close()
		eb.Close()
		return nil, nil, err
	}
	db, err := Open(eb, nil)
	if err != nil {
		da.Close()
		eb.Close()
		return nil, nil, err
	}
	return da, db, nil
}

// macOf returns the MAC address of the interface that holds a, or zero.
func macOf(a netip.Addr) [6]byte {
	var mac [6]byte
	ifs, err := net.Interfaces()
	if err != nil {
		return mac
	}
	for _, ifc := range ifs {
		if len(ifc.HardwareAddr) != 6 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
					copy(mac[:], ifc.HardwareAddr)
					return mac
				}
			}
		}
	}
	return mac
}
