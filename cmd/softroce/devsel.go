package main

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
}

// errNoDevice and errAmbiguousDevice are wrapped by resolveDevice's errors.
var (
	errNoDevice        = errors.New("no such device")
	errAmbiguousDevice = errors.New("ambiguous device")
)

// resolveDevice finds the device a -d argument names: a link, then a netdev,
// then an IP address (with an optional :port). With no name it picks the only
// link, or loopback (127.0.0.1:4791) when there are none.
func resolveDevice(name string) (Device, error) {
	st, err := loadState()
	if err != nil {
		return Device{}, err
	}
	host, err := hostInterfaces()
	if err != nil {
		return Device{}, fmt.Errorf("listing network interfaces: %w", err)
	}
	return resolveIn(name, st.Links, host)
}

// resolveIn is resolveDevice over given links and interfaces (for tests).
func resolveIn(name string, links []linkEntry, host []hostIface) (Device, error) {
	if name == "" {
		switch len(links) {
		case 0:
			d := Device{Name: "lo", Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), wire.UDPPort)}
			if ifc := ifaceWithAddr(host, d.Addr.Addr()); ifc != nil {
				d.Name, d.Netdev = ifc.Name, ifc.Name
			}
			return d, nil
		case 1:
			return linkDevice(&links[0], host)
		}
		return Device{}, fmt.Errorf("%w: %d links exist, choose one with -d (%s)", errAmbiguousDevice, len(links), describeLinks(links))
	}
	for i := range links {
		if links[i].Name == name {
			return linkDevice(&links[i], host)
		}
	}
	if ifc := ifaceByName(host, name); ifc != nil {
		var on []linkEntry
		for _, l := range links {
			if l.Netdev == name || l.Netdev == "" && ifaceWithAddr(host, l.addr().Addr()) == ifc {
				on = append(on, l)
			}
		}
		switch len(on) {
		case 0:
			a, ok := ifc.gid()
			if !ok {
				return Device{}, fmt.Errorf("%w: netdev %s has no IP address to use as its GID", errNoDevice, name)
			}
			return Device{Name: name, Addr: netip.AddrPortFrom(a, wire.UDPPort), Netdev: name}, nil
		case 1:
			return linkDevice(&on[0], host)
		}
		return Device{}, fmt.Errorf("%w: netdev %s carries %d links, choose one with -d (%s)", errAmbiguousDevice, name, len(on), describeLinks(on))
	}
	if ap, err := parseDeviceAddr(name); err == nil {
		_, perr := netip.ParseAddrPort(name)
		hasPort := perr == nil
		var match []Device
		var matchLinks []linkEntry
		for i := range links {
			d, err := linkDevice(&links[i], host)
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
			return Device{}, fmt.Errorf("%w: %s is used by %d links, choose one with -d (%s)", errAmbiguousDevice, name, len(match), describeLinks(matchLinks))
		}
		ifc := ifaceWithAddr(host, ap.Addr())
		if ifc == nil {
			return Device{}, fmt.Errorf("%w: %s is not an address of this host (addresses: %s)", errNoDevice, ap.Addr(), describeAddrs(host))
		}
		if a := ap.Addr(); a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
			ap = netip.AddrPortFrom(a.WithZone(ifc.Name), ap.Port())
		}
		return Device{Name: ap.Addr().WithZone("").String(), Addr: ap, Netdev: ifc.Name}, nil
	}
	return Device{}, fmt.Errorf("%w %q: not a link, a netdev or an IP address of this host (%s; netdevs: %s)",
		errNoDevice, name, describeLinks(links), describeNetdevs(host))
}

// linkDevice resolves a link to its current address.
func linkDevice(l *linkEntry, host []hostIface) (Device, error) {
	d := Device{Name: l.Name}
	if l.Netdev != "" {
		ifc := ifaceByName(host, l.Netdev)
		if ifc == nil {
			return d, fmt.Errorf("%w: link %s: netdev %s no longer exists (netdevs: %s; remove the link with 'softroce link delete %s')",
				errNoDevice, l.Name, l.Netdev, describeNetdevs(host), l.Name)
		}
		d.Netdev = l.Netdev
		if l.Addr == "" {
			a, ok := ifc.gid()
			if !ok {
				return d, fmt.Errorf("%w: link %s: netdev %s has no IP address to use as its GID", errNoDevice, l.Name, l.Netdev)
			}
			d.Addr = netip.AddrPortFrom(a, wire.UDPPort)
			return d, nil
		}
	}
	d.Addr = l.addr()
	if !d.Addr.IsValid() {
		return d, fmt.Errorf("%w: link %s: bad address %q in the state file", errNoDevice, l.Name, l.Addr)
	}
	if ifc := ifaceWithAddr(host, d.Addr.Addr()); ifc != nil {
		if d.Netdev != "" && d.Netdev != ifc.Name {
			return d, fmt.Errorf("%w: link %s: address %s is on %s, not on netdev %s", errNoDevice, l.Name, d.Addr.Addr(), ifc.Name, d.Netdev)
		}
		d.Netdev = ifc.Name
		if a := d.Addr.Addr(); a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
			d.Addr = netip.AddrPortFrom(a.WithZone(ifc.Name), d.Addr.Port())
		}
	} else {
		return d, fmt.Errorf("%w: link %s: address %s is not on this host now (addresses: %s)", errNoDevice, l.Name, d.Addr.Addr(), describeAddrs(host))
	}
	return d, nil
}

// parseDeviceAddr parses "IP", "IP:PORT" or "[IPv6]:PORT"; the port defaults to 4791.
func parseDeviceAddr(s string) (netip.AddrPort, error) {
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

// hostIface is one network interface as devsel and link see it.
type hostIface struct {
	Name     string
	Up       bool // administratively up
	Running  bool // carrier (operationally up)
	Loopback bool
	Addrs    []netip.Addr
}

// hostInterfaces lists the host's interfaces; tests replace it.
var hostInterfaces = func() ([]hostIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]hostIface, 0, len(ifs))
	for _, i := range ifs {
		h := hostIface{Name: i.Name, Up: i.Flags&net.FlagUp != 0, Running: i.Flags&net.FlagRunning != 0,
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

// gid returns the address a device on this interface uses: the first IPv4
// address (rxe's IPv4-mapped GID), else the first global IPv6, else a
// link-local one.
func (h *hostIface) gid() (netip.Addr, bool) {
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

func ifaceByName(host []hostIface, name string) *hostIface {
	for i := range host {
		if host[i].Name == name {
			return &host[i]
		}
	}
	return nil
}

// ifaceWithAddr returns the interface holding a (zones ignored), or nil.
// Every loopback address (127.0.0.0/8, ::1) belongs to the loopback
// interface: Linux answers on all of 127/8 although only 127.0.0.1 is
// configured, so "-d 127.0.0.2" is a second device on one host.
func ifaceWithAddr(host []hostIface, a netip.Addr) *hostIface {
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

func describeNetdevs(host []hostIface) string {
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

func describeAddrs(host []hostIface) string {
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

func describeLinks(links []linkEntry) string {
	if len(links) == 0 {
		return "no links: add one with 'softroce link add NAME netdev DEV'"
	}
	s := make([]string, len(links))
	for i, l := range links {
		s[i] = l.Name + " (" + l.target() + ")"
	}
	return "links: " + strings.Join(s, ", ")
}

// State file.

// stateEnv names the environment variable that overrides the state file path.
const stateEnv = "SOFTROCE_STATE"

// linkEntry is one link in the state file.
type linkEntry struct {
	Name   string `json:"name"`
	Netdev string `json:"netdev,omitempty"`
	Addr   string `json:"addr,omitempty"` // IP or IP:port
}

// addr returns the link's configured address (invalid for netdev-only links).
func (l *linkEntry) addr() netip.AddrPort {
	if l.Addr == "" {
		return netip.AddrPort{}
	}
	ap, _ := parseDeviceAddr(l.Addr)
	return ap
}

// target describes what the link is bound to, e.g. "netdev eth0".
func (l *linkEntry) target() string {
	var s []string
	if l.Netdev != "" {
		s = append(s, "netdev "+l.Netdev)
	}
	if l.Addr != "" {
		s = append(s, "addr "+l.addr().String())
	}
	return strings.Join(s, " ")
}

// stateFile is the JSON document holding the links.
type stateFile struct {
	Version int         `json:"version"`
	Links   []linkEntry `json:"links"`
	path    string
}

// statePath returns $SOFTROCE_STATE, else $XDG_STATE_HOME/softroce/links.json,
// else ~/.local/state/softroce/links.json.
func statePath() (string, error) {
	if p := os.Getenv(stateEnv); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "softroce", "links.json"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the state file: %w (set %s to a file path)", err, stateEnv)
	}
	return filepath.Join(home, ".local", "state", "softroce", "links.json"), nil
}

// loadState reads the state file; a missing file is an empty state.
func loadState() (*stateFile, error) {
	p, err := statePath()
	if err != nil {
		return nil, err
	}
	st := &stateFile{Version: 1, path: p}
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
	st.path = p
	return st, nil
}

// save writes the state atomically: a temporary file in the same
// directory, synced, then renamed over the old one.
func (st *stateFile) save() error {
	dir := filepath.Dir(st.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving the link state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(st.path)+".*")
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
		err = os.Rename(tmp, st.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving the link state to %s: %w", st.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// validLinkName matches what rdma accepts for device names, conservatively.
var validLinkName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)
