package dump

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
)

func init() {
	registerCmd(&cli.Command{
		Name:    "link",
		Summary: "add, show and delete softroce links (like 'rdma link')",
		Run:     runLink,
		Subs:    []string{"show", "add", "delete"},
	})
}

const linkUsage = `Usage: softroce link [show] [-j] [NAME]
       softroce link add NAME [type rxe] netdev DEV [addr IP[:PORT]] [sport qp]
       softroce link add NAME addr IP[:PORT] [sport qp]
       softroce link delete NAME

A link names a softroce device, as 'rdma link add rxe0 type rxe netdev eth0'
does for the kernel's rxe. A netdev link uses the netdev's first IPv4
address (else IPv6) and UDP port 4791; an addr link a fixed address.
Every tool's -d flag takes a link name, a netdev or an IP address.
'sport qp' sends each QP's datagrams from its own UDP source port, the one
rxe would use (0xC000 and up), so that switches hashing on the 5-tuple
spread QPs over paths (ECMP); it opens a socket per port, up to 1024. By
default all of a device's datagrams leave from one port.
Links are kept in $SOFTROCE_STATE, else $XDG_STATE_HOME/softroce/links.json,
else ~/.local/state/softroce/links.json.
`

func runLink(args []string, stdout, stderr io.Writer) int {
	g := cli.Getopt{Prog: "softroce link", LongOnly: true}
	jsonOut := false
	g.Flag('j', "json", &jsonOut)
	rest, code, ok := g.ParseArgs(args, stdout, stderr, func(w io.Writer) { fmt.Fprint(w, linkUsage) })
	if !ok {
		return code
	}
	if len(rest) > 0 && rest[0] == "help" {
		fmt.Fprint(stdout, linkUsage)
		return cli.ExitOK
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	if len(rest) == 0 {
		return linkShow(nil, jsonOut, stdout, stderr)
	}
	switch rest[0] {
	case "show", "list", "ls":
		return linkShow(rest[1:], jsonOut, stdout, stderr)
	case "add":
		return linkAdd(rest[1:], stdout, stderr)
	case "delete", "del", "remove", "rm":
		return linkDelete(rest[1:], stdout, stderr)
	}
	return cli.UsageErr(stderr, g.Prog, "unknown subcommand %q (want show, add or delete)", rest[0])
}

// linkStatus is one line of 'link show'.
type linkStatus struct {
	Ifname    string `json:"ifname"`
	Port      int    `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"physical_state"`
	Netdev    string `json:"netdev,omitempty"`
	Addr      string `json:"addr,omitempty"`
	Sport     string `json:"sport,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// linkStatusOf reports a link as rdma reports rxe ports: ACTIVE/LINK_UP when its
// netdev is up with carrier and holds the address, DOWN/DISABLED otherwise.
func linkStatusOf(l *toolkit.LinkEntry, host []toolkit.HostIface) linkStatus {
	s := linkStatus{Ifname: l.Name, Port: 1, State: "DOWN", PhysState: "DISABLED", Netdev: l.Netdev, Sport: l.Sport}
	d, err := toolkit.LinkDevice(l, host)
	if d.Addr.IsValid() {
		s.Addr = d.Addr.String()
	} else if l.Addr != "" {
		s.Addr = l.AddrPort().String()
	}
	if d.Netdev != "" {
		s.Netdev = d.Netdev
	}
	if err != nil {
		switch {
		case l.Netdev != "" && toolkit.IfaceByName(host, l.Netdev) == nil:
			s.Problem = "netdev missing"
		case l.Addr == "":
			s.Problem = "no IP address"
		case toolkit.IfaceWithAddr(host, l.AddrPort().Addr()) == nil:
			s.Problem = "address not on this host"
		default:
			s.Problem = "address not on netdev " + l.Netdev
		}
		return s
	}
	ifc := toolkit.IfaceByName(host, d.Netdev)
	switch {
	case ifc == nil:
	case !ifc.Up:
		s.Problem = "netdev " + ifc.Name + " is down"
	case !ifc.Running && !ifc.Loopback:
		s.State, s.PhysState = "DOWN", "POLLING"
		s.Problem = "netdev " + ifc.Name + " has no carrier"
	default:
		s.State, s.PhysState = "ACTIVE", "LINK_UP"
	}
	return s
}

func linkShow(args []string, jsonOut bool, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		return cli.UsageErr(stderr, "softroce link", "show takes one link name at most, got %q", args)
	}
	st, err := toolkit.LoadState()
	if err != nil {
		fmt.Fprintf(stderr, "softroce link: %v\n", err)
		return 1
	}
	host, err := toolkit.HostInterfaces()
	if err != nil {
		fmt.Fprintf(stderr, "softroce link: listing interfaces: %v\n", err)
		return 1
	}
	links := st.Links
	if len(args) == 1 {
		i := slices.IndexFunc(links, func(l toolkit.LinkEntry) bool { return l.Name == args[0] })
		if i < 0 {
			fmt.Fprintf(stderr, "softroce link: no link %q (%s)\n", args[0], toolkit.DescribeLinks(links))
			return 1
		}
		links = links[i : i+1]
	}
	out := make([]linkStatus, len(links))
	for i := range links {
		out[i] = linkStatusOf(&links[i], host)
	}
	if jsonOut {
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	for _, s := range out {
		fmt.Fprintf(stdout, "link %s/%d state %s physical_state %s", s.Ifname, s.Port, s.State, s.PhysState)
		if s.Netdev != "" {
			fmt.Fprintf(stdout, " netdev %s", s.Netdev)
		}
		if s.Addr != "" {
			fmt.Fprintf(stdout, " addr %s", s.Addr)
		}
		if s.Sport != "" {
			fmt.Fprintf(stdout, " sport %s", s.Sport)
		}
		if s.Problem != "" {
			fmt.Fprintf(stdout, " (%s)", s.Problem)
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

func linkAdd(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		return cli.UsageErr(stderr, "softroce link", "add needs a NAME and netdev DEV or addr IP[:PORT]")
	}
	// A malformed command line is a usage error (exit 2); a request that
	// cannot be carried out here a failure (exit 1).
	l, err := parseLinkAdd(args)
	if err != nil {
		return cli.UsageErr(stderr, "softroce link add", "%v", err)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "softroce link add: %v\n", err)
		return cli.ExitFailure
	}
	st, err := toolkit.LoadState()
	if err != nil {
		return fail(err)
	}
	host, err := toolkit.HostInterfaces()
	if err != nil {
		return fail(fmt.Errorf("listing interfaces: %v", err))
	}
	if err := checkLinkAdd(&l, st, host, stderr); err != nil {
		return fail(err)
	}
	st.Links = append(st.Links, l)
	if err := st.Save(); err != nil {
		return fail(err)
	}
	return 0
}

// parseLinkAdd parses "NAME key value...": netdev, addr, sport, type.
func parseLinkAdd(args []string) (toolkit.LinkEntry, error) {
	l := toolkit.LinkEntry{Name: args[0]}
	if !toolkit.ValidLinkName.MatchString(l.Name) {
		return l, fmt.Errorf("bad link name %q: use up to 64 letters, digits, '_', '.' or '-'", l.Name)
	}
	kv := args[1:]
	for len(kv) > 0 {
		if len(kv) < 2 {
			return l, fmt.Errorf("%q needs a value", kv[0])
		}
		if err := setLinkKey(&l, kv[0], kv[1]); err != nil {
			return l, err
		}
		kv = kv[2:]
	}
	if l.Netdev == "" && l.Addr == "" {
		return l, errors.New("give 'netdev DEV' or 'addr IP[:PORT]'")
	}
	return l, nil
}

// setLinkKey sets the keyword k of the link l to v.
func setLinkKey(l *toolkit.LinkEntry, k, v string) error {
	switch k {
	case "type":
		if v != "rxe" && v != "softroce" {
			return fmt.Errorf("type %q is not supported: softroce links are RoCEv2 like rxe (use 'type rxe' or leave it out)", v)
		}
	case "netdev", "dev":
		l.Netdev = v
	case "addr", "address":
		ap, err := toolkit.ParseDeviceAddr(v)
		if err != nil {
			return err
		}
		if a := ap.Addr(); a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("%s cannot be a device address: give a unicast address of this host", a)
		}
		l.Addr = ap.String()
		if ap.Port() == 4791 {
			l.Addr = ap.Addr().String()
		}
	case "sport":
		switch v {
		case toolkit.SportQP:
			l.Sport = v
		case "shared":
			l.Sport = ""
		default:
			return fmt.Errorf("sport %q: want 'qp' (a UDP source port per QP, as rxe) or 'shared' (one per device, the default)", v)
		}
	default:
		return fmt.Errorf("unknown keyword %q (want netdev, addr, sport or type)", k)
	}
	return nil
}

// checkLinkAdd checks the new link l against this host's interfaces and
// the links in st, warning on stderr of a link that stays DOWN for now.
func checkLinkAdd(l *toolkit.LinkEntry, st *toolkit.StateFile, host []toolkit.HostIface, stderr io.Writer) error {
	for _, o := range st.Links {
		if o.Name == l.Name {
			return fmt.Errorf("link %s already exists (%s); delete it first", o.Name, o.Target())
		}
	}
	if l.Netdev != "" && toolkit.IfaceByName(host, l.Netdev) == nil {
		return fmt.Errorf("no netdev %q (netdevs: %s)", l.Netdev, toolkit.DescribeNetdevs(host))
	}
	if l.Addr != "" {
		a := l.AddrPort().Addr()
		ifc := toolkit.IfaceWithAddr(host, a)
		switch {
		case ifc == nil && l.Netdev != "":
			return fmt.Errorf("%s is not an address of netdev %s (addresses: %s)", a, l.Netdev, toolkit.DescribeAddrs(host))
		case ifc == nil:
			fmt.Fprintf(stderr, "softroce link add: warning: %s is not an address of this host (addresses: %s); link %s stays DOWN until it is\n",
				a, toolkit.DescribeAddrs(host), l.Name)
		case l.Netdev != "" && ifc.Name != l.Netdev:
			return fmt.Errorf("%s is on %s, not on netdev %s", a, ifc.Name, l.Netdev)
		}
	} else if ifc := toolkit.IfaceByName(host, l.Netdev); ifc != nil {
		if _, ok := ifc.GID(); !ok {
			fmt.Fprintf(stderr, "softroce link add: warning: netdev %s has no IP address yet; link %s stays DOWN until it has one\n", l.Netdev, l.Name)
		}
	}
	// One link per netdev without an explicit address, and per address, as
	// the kernel allows one rxe device per netdev.
	nd, ndErr := toolkit.LinkDevice(l, host)
	for _, o := range st.Links {
		if l.Addr == "" && o.Addr == "" && o.Netdev == l.Netdev {
			return fmt.Errorf("netdev %s already has link %s", l.Netdev, o.Name)
		}
		if od, err := toolkit.LinkDevice(&o, host); err == nil && ndErr == nil && od.Addr == nd.Addr {
			return fmt.Errorf("link %s already uses %s", o.Name, od.Addr)
		}
	}
	return nil
}

func linkDelete(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		return cli.UsageErr(stderr, "softroce link", "delete takes one link name, got %q", args)
	}
	st, err := toolkit.LoadState()
	if err != nil {
		fmt.Fprintf(stderr, "softroce link delete: %v\n", err)
		return 1
	}
	i := slices.IndexFunc(st.Links, func(l toolkit.LinkEntry) bool { return l.Name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "softroce link delete: no link %q (%s)\n", args[0], toolkit.DescribeLinks(st.Links))
		return 1
	}
	st.Links = slices.Delete(st.Links, i, i+1)
	if err := st.Save(); err != nil {
		fmt.Fprintf(stderr, "softroce link delete: %v\n", err)
		return 1
	}
	return 0
}
