package toolkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

// ToolDevice is an open softroce device as the traffic tools use it: the
// device a -d argument names, on a UDP socket, optionally teeing its
// traffic to a pcap file (--pcap).
type ToolDevice struct {
	Info Device
	Dev  *verbs.Device
	Tee  *capture.TeeEndpoint // nil without --pcap
	Pcap *capture.Writer
}

// DeviceMAC returns the hardware address of netdev, or zero (the engine
// then derives one from the IP address) for loopback and unknown devices.
func DeviceMAC(netdev string) [6]byte {
	var mac [6]byte
	if netdev == "" {
		return mac
	}
	ifc, err := net.InterfaceByName(netdev)
	if err == nil && len(ifc.HardwareAddr) == 6 {
		copy(mac[:], ifc.HardwareAddr)
	}
	return mac
}

// UDPOptions returns the link/udp options of device d: the tools' logger,
// per-QP source ports when its link says 'sport qp', and same-host lanes
// (LocalLanes).
func UDPOptions(d Device) []udp.Option {
	opts := []udp.Option{udp.WithLogger(Logger)}
	if d.QPPorts {
		opts = append(opts, udp.WithSourcePorts(QPPortSockets))
	}
	if LocalLanes() {
		opts = append(opts, udp.WithLocal())
	}
	return opts
}

// EnvLocal names the variable that turns same-host lanes (udp.Config.Local)
// off ("0"); they are on otherwise.
const EnvLocal = "SOFTROCE_LOCAL"

// LocalLanes reports whether the tools' and the C library's devices use
// same-host lanes: unless EnvLocal is "0".
func LocalLanes() bool { return os.Getenv(EnvLocal) != "0" }

// DeviceAt returns the device at address ap, as the link with that address
// describes it (its 'sport'), or a plain device there when no link has it:
// for the tools that take an address rather than -d (rping, krping).
func DeviceAt(ap netip.AddrPort) Device {
	d := Device{Name: ap.Addr().String(), Addr: ap}
	st, err := LoadState()
	if err != nil || len(st.Links) == 0 {
		return d
	}
	host, err := HostInterfaces()
	if err != nil {
		return d
	}
	for i := range st.Links {
		if ld, err := LinkDevice(&st.Links[i], host); err == nil && ld.Addr.Addr().WithZone("") == ap.Addr().WithZone("") && ld.Addr.Port() == ap.Port() {
			return ld
		}
	}
	return d
}

// OpenDevice opens the device name (-d) on a UDP socket. With pcapPath
// set, every datagram it sends and receives is written there, framed as
// Ethernet/IP/UDP with a valid ICRC (capture.Writer).
func OpenDevice(name, pcapPath string) (*ToolDevice, error) {
	info, err := ResolveDevice(name)
	if err != nil {
		return nil, err
	}
	ep, err := udp.Listen(info.Addr, UDPOptions(info)...)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("device %s: UDP %v is in use (another softroce tool on this device?): %w", info.Name, info.Addr, err)
		}
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	t := &ToolDevice{Info: info}
	var lep link.Endpoint = ep
	if pcapPath != "" {
		w, err := capture.Create(pcapPath, nil)
		if err != nil {
			ep.Close()
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		t.Pcap = w
		t.Tee = capture.Tee(ep, w)
		lep = t.Tee
	}
	t.Dev, err = verbs.Open(lep, &verbs.Config{Name: info.Name, MAC: DeviceMAC(info.Netdev), BusyPoll: latencyBusyPoll(),
		Logger: Logger})
	if err != nil {
		lep.Close()
		if t.Pcap != nil {
			t.Pcap.Close()
		}
		return nil, fmt.Errorf("device %s: %w", info.Name, err)
	}
	return t, nil
}

// WithDevice opens the device name as OpenDevice does, runs f on it and
// closes it; the error of f, else that of Close.
func WithDevice(name, pcapPath string, f func(*ToolDevice) error) (err error) {
	td, err := OpenDevice(name, pcapPath)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := td.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	return f(td)
}

// Close closes the device and the capture file, and appends the device's
// counters to $SOFTROCE_STATS when it is set.
func (t *ToolDevice) Close() error {
	err := t.Dev.Close()
	if serr := appendStats(t.Dev); err == nil {
		err = serr
	}
	if t.Pcap != nil {
		if cerr := t.Pcap.Close(); err == nil {
			err = cerr
		}
		if err == nil && t.Tee.Err() != nil {
			err = fmt.Errorf("--pcap: %w", t.Tee.Err())
		}
	}
	return err
}

// GID returns the device's GID at index i, refusing empty entries.
func (t *ToolDevice) GID(i int) (verbs.GID, error) {
	g, err := t.Dev.QueryGID(1, i)
	if err != nil {
		return g, err
	}
	if g == (verbs.GID{}) {
		return g, fmt.Errorf("GID index %d of %s is empty (populated: 0..%d; 1 is the IP address, as rxe's IPv4-mapped GID)", i, t.Info.Name, len(t.Dev.GIDs())-1)
	}
	if own := t.Info.Addr.Addr().Unmap().WithZone(""); g.Addr().WithZone("") != own {
		// rxe can send from its link-local GID 0 through the netdev; a
		// softroce device sends from the IP address its socket is bound to.
		return g, fmt.Errorf("GID index %d of %s is %s, which the device cannot send from: use the GID of its address %s (index 1)", i, t.Info.Name, g, own)
	}
	return g, nil
}

// SignalContext is cancelled by SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
