// Package toolkit holds what several softroce tool families share: the
// device a -d argument names (links, netdevs, addresses and the link state
// file), opening it with an optional pcap tee, neighbour resolution and the
// signal context.
package toolkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/softroce/softroce/wire"
)

// Device is what a tool's -d flag names: a softroce link, a netdev or an IP
// address, resolved to the UDP address the device sends and receives on.
type Device struct {
	// Name is the link's name, or the netdev (or IP) when no link names it.
	Name string
	// Addr is the IP address (the device's GID) and UDP port (4791 unless a
	// link says otherwise).
	Addr netip.AddrPort
	// Netdev is the interface that holds Addr ("" if none does).
	Netdev string
	// QPPorts sends each QP's datagrams from its own UDP source port, as
	// rxe does (the link's 'sport qp'; udp.Config.SourcePorts).
	QPPorts bool
}

// ErrNoDevice and ErrAmbiguousDevice are wrapped by ResolveDevice's errors.
var (
	ErrNoDevice        = errors.New("no such device")
	ErrAmbiguousDevice = errors.New("ambiguous device")
)

// ResolveDevice finds the device a -d argument names: a link, then a netdev,
// then an IP address (with an optional :port). With no name it picks the only
// link, or loopback (127.0.0.1:4791) when there are none.
func ResolveDevice(name string) (Device, error) {
	st, err := LoadState()
	if err != nil {
		return Device{}, err
	}
	host, err := HostInterfaces()
	if err != nil {
		return Device{}, fmt.Errorf("listing network interfaces: %w", err)
	}
	return ResolveIn(name, st.Links, host)
}

// ResolveIn is ResolveDevice over given links and interfaces (for tests).
func ResolveIn(name string, links []LinkEntry, host []HostIface) (Device, error) {
	if name == "" {
		switch len(links) {
		case 0:
			d := Device{Name: "lo", Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), wire.UDPPort)}
			if ifc := IfaceWithAddr(host, d.Addr.Addr()); ifc != nil {
				d.Name, d.Netdev = ifc.Name, ifc.Name
			}
			return d, nil
		case 1:
			return LinkDevice(&links[0], host)
		}
		return Device{}, fmt.Errorf("%w: %d links exist, choose one with -d (%s)", ErrAmbiguousDevice, len(links), DescribeLinks(links))
	}
	for i := range links {
		if links[i].Name == name {
			return LinkDevice(&links[i], host)
		}
	}
	if ifc := IfaceByName(host, name); ifc != nil {
		var on []LinkEntry
		for _, l := range links {
			if l.Netdev == name || l.Netdev == "" && IfaceWithAddr(host, l.AddrPort().Addr()) == ifc {
				on = append(on, l)
			}
		}
		switch len(on) {
		case 0:
			a, ok := ifc.GID()
			if !ok {
				return Device{}, fmt.Errorf("%w: netdev %s has no IP address to use as its GID", ErrNoDevice, name)
			}
			return Device{Name: name, Addr: netip.AddrPortFrom(a, wire.UDPPort), Netdev: name}, nil
		case 1:
			return LinkDevice(&on[0], host)
		}
		return Device{}, fmt.Errorf("%w: netdev %s carries %d links, choose one with -d (%s)", ErrAmbiguousDevice, name, len(on), DescribeLinks(on))
	}
	if ap, err := ParseDeviceAddr(name); err == nil {
		_, perr := netip.ParseAddrPort(name)
		hasPort := perr == nil
		var match []Device
		var matchLinks []LinkEntry
		for i := range links {
			d, err := LinkDevice(&links[i], host)
			if err == nil && d.Addr.Addr().WithZone("") == ap.Addr().WithZone("") && (!hasPort || d.Addr.Port() == ap.Port()) {
				match = append(match, d)
				matchLinks = append(matchLinks, links[i])
			}
		}
		switch len(match) {
		case 1:
			return match[0], nil
		case 0:
		default:
			return Device{}, fmt.Errorf("%w: %s is used by %d links, choose one with -d (%s)", ErrAmbiguousDevice, name, len(match), DescribeLinks(matchLinks))
		}
		ifc := IfaceWithAddr(host, ap.Addr())
		if ifc == nil {
			return Device{}, fmt.Errorf("%w: %s is not an address of this host (addresses: %s)", ErrNoDevice, ap.Addr(), DescribeAddrs(host))
		}
		if a := ap.Addr(); a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
			ap = netip.AddrPortFrom(a.WithZone(ifc.Name), ap.Port())
		}
		return Device{Name: ap.Addr().WithZone("").String(), Addr: ap, Netdev: ifc.Name}, nil
	}
	return Device{}, fmt.Errorf("%w %q: not a link, a netdev or an IP address of this host (%s; netdevs: %s)",
		ErrNoDevice, name, DescribeLinks(links), DescribeNetdevs(host))
}

// LinkDevice resolves a link to its current address.
func LinkDevice(l *LinkEntry, host []HostIface) (Device, error) {
	d := Device{Name: l.Name, QPPorts: l.Sport == SportQP}
	if l.Netdev != "" {
		ifc := IfaceByName(host, l.Netdev)
		if ifc == nil {
			return d, fmt.Errorf("%w: link %s: netdev %s no longer exists (netdevs: %s; remove the link with 'softroce link delete %s')",
				ErrNoDevice, l.Name, l.Netdev, DescribeNetdevs(host), l.Name)
		}
		d.Netdev = l.Netdev
		if l.Addr == "" {
			a, ok := ifc.GID()
			if !ok {
				return d, fmt.Errorf("%w: link %s: netdev %s has no IP address to use as its GID", ErrNoDevice, l.Name, l.Netdev)
			}
			d.Addr = netip.AddrPortFrom(a, wire.UDPPort)
			return d, nil
		}
	}
	d.Addr = l.AddrPort()
	if !d.Addr.IsValid() {
		return d, fmt.Errorf("%w: link %s: bad address %q in the state file", ErrNoDevice, l.Name, l.Addr)
	}
	if ifc := IfaceWithAddr(host, d.Addr.Addr()); ifc != nil {
		if d.Netdev != "" && d.Netdev != ifc.Name {
			return d, fmt.Errorf("%w: link %s: address %s is on %s, not on netdev %s", ErrNoDevice, l.Name, d.Addr.Addr(), ifc.Name, d.Netdev)
		}
		d.Netdev = ifc.Name
		if a := d.Addr.Addr(); a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
			d.Addr = netip.AddrPortFrom(a.WithZone(ifc.Name), d.Addr.Port())
		}
	} else {
		return d, fmt.Errorf("%w: link %s: address %s is not on this host now (addresses: %s)", ErrNoDevice, l.Name, d.Addr.Addr(), DescribeAddrs(host))
	}
	return d, nil
}

// ParseDeviceAddr parses "IP", "IP:PORT" or "[IPv6]:PORT"; the port defaults to 4791.
func ParseDeviceAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return ap, fmt.Errorf("port 0 in %q: give a UDP port or leave it out (4791)", s)
		}
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or IP:port", s)
	}
	return netip.AddrPortFrom(a, wire.UDPPort), nil
}

// HostIface is one network interface as devsel and link see it.
type HostIface struct {
	Name     string
	Up       bool // administratively up
	Running  bool // carrier (operationally up)
	Loopback bool
	Addrs    []netip.Addr
}

// HostInterfaces lists the host's interfaces; tests replace it.
var HostInterfaces = func() ([]HostIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]HostIface, 0, len(ifs))
	for _, i := range ifs {
		h := HostIface{Name: i.Name, Up: i.Flags&net.FlagUp != 0, Running: i.Flags&net.FlagRunning != 0,
			Loopback: i.Flags&net.FlagLoopback != 0}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					ip = ip.Unmap()
					if ip.Is6() && ip.IsLinkLocalUnicast() {
						ip = ip.WithZone(i.Name)
					}
					h.Addrs = append(h.Addrs, ip)
				}
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// GID returns the address a device on this interface uses: the first IPv4
// address (rxe's IPv4-mapped GID), else the first global IPv6, else a
// link-local one.
func (h *HostIface) GID() (netip.Addr, bool) {
	for _, pass := range []func(netip.Addr) bool{
		netip.Addr.Is4,
		func(a netip.Addr) bool { return a.Is6() && !a.IsLinkLocalUnicast() },
		func(a netip.Addr) bool { return true },
	} {
		for _, a := range h.Addrs {
			if pass(a) {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// IfaceByName returns the interface called name in host, or nil.
func IfaceByName(host []HostIface, name string) *HostIface {
	for i := range host {
		if host[i].Name == name {
			return &host[i]
		}
	}
	return nil
}

// IfaceWithAddr returns the interface holding a (zones ignored), or nil.
// Every loopback address (127.0.0.0/8, ::1) belongs to the loopback
// interface: Linux answers on all of 127/8 although only 127.0.0.1 is
// configured, so "-d 127.0.0.2" is a second device on one host.
func IfaceWithAddr(host []HostIface, a netip.Addr) *HostIface {
	a = a.Unmap().WithZone("")
	for i := range host {
		for _, b := range host[i].Addrs {
			if b.WithZone("") == a {
				return &host[i]
			}
		}
	}
	if a.IsLoopback() {
		for i := range host {
			if host[i].Loopback {
				return &host[i]
			}
		}
	}
	return nil
}

// DescribeNetdevs lists host's netdevs for an error message.
func DescribeNetdevs(host []HostIface) string {
	names := make([]string, len(host))
	for i, h := range host {
		names[i] = h.Name
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// DescribeAddrs lists host's addresses for an error message.
func DescribeAddrs(host []HostIface) string {
	var s []string
	for _, h := range host {
		for _, a := range h.Addrs {
			s = append(s, a.WithZone("").String()+" on "+h.Name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// DescribeLinks lists the links for an error message.
func DescribeLinks(links []LinkEntry) string {
	if len(links) == 0 {
		return "no links: add one with 'softroce link add NAME netdev DEV'"
	}
	s := make([]string, len(links))
	for i, l := range links {
		s[i] = l.Name + " (" + l.Target() + ")"
	}
	return "links: " + strings.Join(s, ", ")
}

// State file.

// StateEnv names the environment variable that overrides the state file path.
const StateEnv = "SOFTROCE_STATE"

// LinkEntry is one link in the state file.
type LinkEntry struct {
	Name   string `json:"name"`
	Netdev string `json:"netdev,omitempty"`
	Addr   string `json:"addr,omitempty"` // IP or IP:port
	// Sport is how the link picks UDP source ports: "qp" per QP, as rxe
	// ("": one port for the whole device).
	Sport string `json:"sport,omitempty"`
}

// AddrPort returns the link's configured address (invalid for netdev-only links).
func (l *LinkEntry) AddrPort() netip.AddrPort {
	if l.Addr == "" {
		return netip.AddrPort{}
	}
	ap, _ := ParseDeviceAddr(l.Addr)
	return ap
}

// SportQP is LinkEntry.Sport for per-QP UDP source ports.
const SportQP = "qp"

// QPPortSockets is the most per-port send sockets a device with per-QP
// source ports opens (udp.Config.SourcePorts); QPs past them share one port.
const QPPortSockets = 1024

// Target describes what the link is bound to, e.g. "netdev eth0".
func (l *LinkEntry) Target() string {
	var s []string
	if l.Netdev != "" {
		s = append(s, "netdev "+l.Netdev)
	}
	if l.Addr != "" {
		s = append(s, "addr "+l.AddrPort().String())
	}
	if l.Sport != "" {
		s = append(s, "sport "+l.Sport)
	}
	return strings.Join(s, " ")
}

// StateFile is the JSON document holding the links.
type StateFile struct {
	Version int         `json:"version"`
	Links   []LinkEntry `json:"links"`
	Path    string      `json:"-"`
}

// StatePath returns $SOFTROCE_STATE, else $XDG_STATE_HOME/softroce/links.json,
// else ~/.local/state/softroce/links.json.
func StatePath() (string, error) {
	if p := os.Getenv(StateEnv); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "softroce", "links.json"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the state file: %w (set %s to a file path)", err, StateEnv)
	}
	return filepath.Join(home, ".local", "state", "softroce", "links.json"), nil
}

// LoadState reads the state file; a missing file is an empty state.
func LoadState() (*StateFile, error) {
	p, err := StatePath()
	if err != nil {
		return nil, err
	}
	st := &StateFile{Version: 1, Path: p}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the link state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("link state file %s is corrupt (%v): fix or remove it", p, err)
	}
	st.Path = p
	return st, nil
}

// Save writes the state atomically: a temporary file in the same
// directory, synced, then renamed over the old one.
func (st *StateFile) Save() error {
	dir := filepath.Dir(st.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving the link state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(st.Path)+".*")
	if err != nil {
		return fmt.Errorf("saving the link state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, st.Path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving the link state to %s: %w", st.Path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ValidLinkName matches what rdma accepts for device names, conservatively.
var ValidLinkName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)
