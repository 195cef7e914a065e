package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

func init() {
	registerCmd(&cli.Command{Name: "rping", Summary: "RDMA ping over rdma_cm, wire- and output-compatible with rdma-core's rping", Run: runRping})
}

// rping's states (enum test_state), printed in its error messages.
const (
	stIdle = iota + 1
	stConnectRequest
	stAddrResolved
	stRouteResolved
	stConnected
	stReadAdv
	stReadComplete
	stWriteAdv
	stWriteComplete
	stDisconnected
	stError
)

// rping's limits.
const (
	bufSize   = 64 * 1024
	minSize   = 26 // sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ")
	sqDepth   = 16
	defPort   = 7174
	cmTimeout = 2 * time.Second
)

// options are rping's command-line options (and krping's, which map onto them).
type options struct {
	server     int // -1 unset, 0 client, 1 server
	addr       netip.Addr
	src        netip.Addr
	port       int
	count      int
	size       int
	verbose    bool
	validate   bool
	debug      bool
	persistent bool
	selfQP     bool
	// krping modes.
	wlat, rlat, bw, duplex, poll bool
	txdepth                      int
	prefix                       string // "krping: " for krping's lines
	pcap                         string // --pcap: write the device's traffic there
}

// rcb is one rping endpoint (rping's struct rping_cb): the CM ID, the QP and
// its buffers, and the state the CM and CQ handlers signal to the main flow.
type rcb struct {
	o      *options
	stdout io.Writer
	stderr io.Writer
	outMu  *sync.Mutex

	ch    *cm.EventChannel
	id    *cm.ID // client: the connection; server: the listener
	child *cm.ID // server: the connection

	pd  *verbs.PD
	cc  *verbs.CompChannel
	cq  *verbs.CQ
	qp  *verbs.QP
	own bool // QP created by the tool (-q)

	recvBuf, sendBuf []byte
	recvMR, sendMR   *verbs.MR
	rdmaBuf          []byte
	rdmaMR           *verbs.MR
	startBuf         []byte
	startMR          *verbs.MR

	remoteRKey uint32
	remoteAddr uint64
	remoteLen  uint32

	mu     sync.Mutex
	state  int
	failed bool // an error event arrived (rping exits from its CM thread)
	cqErr  bool // a work request completed in error
	// krping duplex: the peer finished and disconnected during the test
	peerDone bool
	testing  bool // the test runs: keepalives on (rping_live.go)
	// halfOpen (-P) counts the server's connections not established yet
	// (and not torn down yet).
	halfOpen *atomic.Int32
	probing  bool // a keepalive WRITE is outstanding
	sem      chan struct{}
	accept   chan struct{} // persistent server: ready for another request

	cqCancel context.CancelFunc
	cqDone   chan struct{}
	polling  bool       // krping poll mode: the CQ thread leaves completions to the test
	held     []verbs.WC // polling: test completions the keepalive polled (pollCQ)
}

func (cb *rcb) setState(s int) { cb.mu.Lock(); cb.state = s; cb.mu.Unlock() }
func (cb *rcb) getState() int  { cb.mu.Lock(); defer cb.mu.Unlock(); return cb.state }
func (cb *rcb) post()          { cb.sem <- struct{}{} }
func (cb *rcb) wait()          { cb.waitLive() }

func (cb *rcb) printf(w io.Writer, format string, args ...any) {
	cb.outMu.Lock()
	fmt.Fprintf(w, format, args...)
	cb.outMu.Unlock()
}

// errf prints to stderr with the tool's prefix ("krping: " for krping).
func (cb *rcb) errf(format string, args ...any) {
	cb.outMu.Lock()
	fmt.Fprint(cb.stderr, cb.o.prefix, fmt.Sprintf(format, args...))
	cb.outMu.Unlock()
}

func (cb *rcb) debugf(format string, args ...any) {
	if cb.o.debug {
		cb.printf(cb.stdout, format, args...)
	}
}

func (cb *rcb) role() string {
	if cb.o.server == 1 {
		return "server"
	}
	return "client"
}

// cstr returns b up to its first NUL, as %s prints a C string.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func runRping(args []string, stdout, stderr io.Writer) int {
	o, err := parseRpingArgs(args, stdout)
	if errors.Is(err, cli.ErrGetoptHelp) {
		return cli.ExitOK
	}
	if err != nil {
		if errors.Is(err, errUsage) {
			return cli.UsageErr(stderr, "softroce rping", "give -s (server) or -c (client)")
		}
		return cli.UsageErr(stderr, "softroce rping", "%v", err)
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	return execRping(o, stdout, stderr)
}

var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]")
	fmt.Fprintln(w, "rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]")
	fmt.Fprintln(w, "\t-c\t\tclient side")
	fmt.Fprintln(w, "\t-I\t\tSource address to bind to for client.")
	fmt.Fprintln(w, "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0")
	fmt.Fprintln(w, "\t-v\t\tdisplay ping data to stdout")
	fmt.Fprintln(w, "\t-V\t\tvalidate ping data")
	fmt.Fprintln(w, "\t-d\t\tdebug printfs")
	fmt.Fprintln(w, "\t-S size \tping data size")
	fmt.Fprintln(w, "\t-C count\tping count times")
	fmt.Fprintln(w, "\t-a addr\t\taddress")
	fmt.Fprintln(w, "\t-p port\t\tport")
	fmt.Fprintln(w, "\t-P\t\tpersistent server mode allowing multiple connections")
	fmt.Fprintln(w, "\t-q\t\tuse self-created, self-modified QP")
	fmt.Fprintln(w, "\t--pcap file\twrite the device's RoCEv2 traffic to a pcap file")
}

// parseRpingArgs parses rping's getopt string "a:I:Pp:C:S:t:scvVdq" with
// the shared grammar (grouped flags like -vV, attached values like -C10,
// options after operands). After -h it prints the help to stdout and
// returns cli.ErrGetoptHelp.
func parseRpingArgs(args []string, stdout io.Writer) (*options, error) {
	o := &options{server: -1, port: defPort, size: 64}
	g := cli.Getopt{Prog: "softroce rping"}
	for _, c := range "aIpCSt" {
		c := byte(c)
		opt := g.Add(c, "", true, func(v string) error { return o.set(c, v) })
		if c != 'a' && c != 'I' {
			opt.Kind = cli.KindNum
		}
	}
	for _, c := range "PscvVdq" {
		c := byte(c)
		g.Add(c, "", false, func(v string) error { return o.set(c, v) })
	}
	g.Str(0, "pcap", &o.pcap)
	ops, err := g.ParseList(args)
	if errors.Is(err, cli.ErrGetoptHelp) {
		g.Help(stdout, usage)
	}
	if err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		return nil, fmt.Errorf("unexpected argument %q", ops[0])
	}
	if o.server == -1 {
		return nil, errUsage
	}
	if o.server == 0 && !o.addr.IsValid() {
		return nil, errors.New("the client needs the server's address (-a addr)")
	}
	return o, nil
}

// parseNum parses an rping number (strtol syntax) into an int.
func parseNum(val string) (int, error) {
	v, err := cli.ParseNum(val, 32)
	return int(v), err
}

// set sets rping's option c (getopt letter) to val.
func (o *options) set(c byte, val string) error {
	if o.setSwitch(c) {
		return nil
	}
	var err error
	switch c {
	case 'a':
		o.addr, err = lookupAddr(val)
	case 'I':
		o.src, err = lookupAddr(val)
	case 'p':
		o.port, err = parseNum(val)
		if err == nil && (o.port < 0 || o.port > 65535) {
			err = fmt.Errorf("port %d out of range", o.port)
		}
	case 'S':
		o.size, err = parseNum(val)
		if err == nil && (o.size < minSize || o.size > bufSize-1) {
			err = fmt.Errorf("Invalid size %d (valid range is %d to %d)", o.size, minSize, bufSize)
		}
	case 'C':
		var n int
		if n, err = parseNum(val); err == nil {
			err = o.setCount(n)
		}
	case 't': // type of service: checked, unused by softroce
		var tos int
		if tos, err = parseNum(val); err == nil && (tos < 0 || tos > 255) {
			err = fmt.Errorf("tos %d out of range (0..255)", tos)
		}
	default:
		return errUsage
	}
	return err
}

// setSwitch sets the option without a value that rping names c (krping's
// names for the ones it shares are in krpingSwitches), and reports whether
// c is one.
func (o *options) setSwitch(c byte) bool {
	switch c {
	case 's':
		o.server = 1
	case 'c':
		o.server = 0
	case 'v':
		o.verbose = true
	case 'V':
		o.validate = true
	case 'd':
		o.debug = true
	case 'P':
		o.persistent = true
	case 'q':
		o.selfQP = true
	default:
		return false
	}
	return true
}

// setCount sets the ping count (rping's -C, krping's count=), as both check it.
func (o *options) setCount(n int) error {
	o.count = n
	if n < 0 {
		return fmt.Errorf("Invalid count %d", n)
	}
	return nil
}

// lookupAddr resolves an IP address or host name (getaddrinfo).
func lookupAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// cmDevice opens a softroce device on addr (UDP port 4791) with a CM agent.
type cmDevice struct {
	dev   *verbs.Device
	agent *cm.Agent
	pcap  *capture.Writer // --pcap, else nil
	tee   *capture.TeeEndpoint
}

// openCMDevice opens the device; with pcapPath set (--pcap) it writes every
// datagram the device sends and receives there.
func openCMDevice(addr netip.Addr, pcapPath string) (*cmDevice, error) {
	cfg := &verbs.Config{Name: "softroce0", MAC: macOf(addr), Logger: toolkit.Logger}
	ap := netip.AddrPortFrom(addr, 4791)
	ep, err := udp.Listen(ap, toolkit.UDPOptions(toolkit.DeviceAt(ap))...) // a link's 'sport qp'
	if err != nil {
		return nil, fmt.Errorf("opening a softroce device on %v: %w", addr, err)
	}
	d := &cmDevice{}
	var lep link.Endpoint = ep
	if pcapPath != "" {
		if d.pcap, err = capture.Create(pcapPath, nil); err != nil {
			ep.Close()
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		d.tee = capture.Tee(ep, d.pcap)
		lep = d.tee
	}
	if d.dev, err = verbs.Open(lep, cfg); err != nil {
		lep.Close()
		if d.pcap != nil {
			d.pcap.Close()
		}
		return nil, fmt.Errorf("opening a softroce device on %v: %w", addr, err)
	}
	if d.agent, err = cm.Attach(d.dev, toolkit.AgentConfig()); err != nil {
		d.dev.Close()
		if d.pcap != nil {
			d.pcap.Close()
		}
		return nil, err
	}
	return d, nil
}

func (d *cmDevice) Close() {
	d.agent.Close()
	d.dev.Close()
	if d.pcap != nil {
		d.pcap.Close()
	}
}

// macOf returns the hardware address of the interface holding addr (zero
// if none: the engine then derives one), so the GUID and link-local GID
// are the netdev's, as rxe's.
func macOf(addr netip.Addr) [6]byte {
	var mac [6]byte
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		as, _ := ifc.Addrs()
		for _, x := range as {
			if n, ok := x.(*net.IPNet); ok {
				if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr && len(ifc.HardwareAddr) == 6 {
					copy(mac[:], ifc.HardwareAddr)
					return mac
				}
			}
		}
	}
	return mac
}

// localAddrToward returns the source address the kernel would use toward dst.
func localAddrToward(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// deviceAddr picks the local address of the tool's device: the server's
// -a (or the default device), the client's -I, or the address the kernel
// would send from toward the server.
func (o *options) deviceAddr() (netip.Addr, error) {
	switch {
	case o.server == 1 && o.addr.IsValid() && !o.addr.IsUnspecified():
		return o.addr, nil
	case o.server == 1:
		d, err := toolkit.ResolveDevice("")
		if err != nil {
			return netip.Addr{}, err
		}
		return d.Addr.Addr().Unmap(), nil
	case o.src.IsValid():
		return o.src, nil
	}
	if o.addr.Is4() && o.addr.IsLoopback() {
		// A server on loopback: its device holds that address, and every
		// 127/8 address works, so use the next one (127.0.0.1 -> 127.0.0.2).
		return o.addr.Next(), nil
	}
	return localAddrToward(o.addr)
}

func execRping(o *options, stdout, stderr io.Writer) int {
	return withRCB("rping", o, stdout, stderr, func(cb *rcb) int {
		switch {
		case o.server == 1 && o.persistent:
			return cb.runPersistentServer()
		case o.server == 1:
			return cb.runServer()
		}
		return cb.runClient()
	})
}

// withRCB is the skeleton rping and krping share: open the device for o,
// create the control block with its CM event channel, ID and CM thread, run
// body, then tear it all down. It returns body's result as an exit code.
func withRCB(tool string, o *options, stdout, stderr io.Writer, body func(cb *rcb) int) int {
	local, err := o.deviceAddr()
	if err != nil {
		fmt.Fprintln(stderr, tool+":", err)
		return 1
	}
	d, err := openCMDevice(local, o.pcap)
	if err != nil {
		fmt.Fprintln(stderr, tool+":", err)
		return 1
	}
	defer d.Close()
	cb := newRCB(o, stdout, stderr, &sync.Mutex{})
	cb.ch = cm.NewEventChannel()
	defer cb.ch.Close()
	if cb.id, err = cb.ch.CreateID(cb, mad.PortSpaceTCP); err != nil {
		cb.errf("rdma_create_id: %v\n", err)
		return 1
	}
	cb.debugf("created cm_id %p\n", cb.id)
	stop := make(chan struct{})
	cmDone := make(chan struct{})
	go cb.cmThread(stop, cmDone)
	ret := body(cb)
	cb.debugf("destroy cm_id %p\n", cb.id)
	cb.id.Destroy()
	close(stop)
	<-cmDone
	return ret & 0xFF
}

func newRCB(o *options, stdout, stderr io.Writer, outMu *sync.Mutex) *rcb {
	return &rcb{o: o, stdout: stdout, stderr: stderr, outMu: outMu, state: stIdle,
		sem: make(chan struct{}, 1024), accept: make(chan struct{}, 1)}
}

// cmThread reads CM events and hands them to the handler of the ID's
// control block (rping's cm_thread).
func (cb *rcb) cmThread(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	cb.accept <- struct{}{}
	for {
		ev, err := cb.ch.Get(ctx)
		if err != nil {
			return
		}
		target := cb
		if x, ok := ev.ID.Context.(*rcb); ok {
			target = x
		}
		target.handleEvent(ev)
	}
}

// handleEvent is rping_cma_event_handler.
func (cb *rcb) handleEvent(ev *cm.Event) {
	who := "child"
	if ev.ID == cb.id {
		who = "parent"
	}
	cb.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, who)
	switch ev.Type {
	case cm.EventAddrResolved:
		cb.setState(stAddrResolved)
		if err := ev.ID.ResolveRoute(cmTimeout); err != nil {
			cb.setState(stError)
			cb.errf("rdma_resolve_route: %v\n", err)
			cb.post()
		}
	case cm.EventRouteResolved:
		cb.setState(stRouteResolved)
		cb.post()
	case cm.EventConnectRequest:
		if !cb.o.persistent && cb.child != nil {
			ev.ID.Reject(nil) // one connection at a time without -P
			ev.ID.Destroy()
			return
		}
		<-cb.accept
		cb.setState(stConnectRequest)
		cb.child = ev.ID
		cb.debugf("child cma %p\n", cb.child)
		cb.post()
	case cm.EventConnectResponse:
		cb.debugf("CONNECT_RESPONSE\n")
		cb.setState(stConnected)
		cb.post()
	case cm.EventEstablished:
		cb.debugf("ESTABLISHED\n")
		if cb.o.server != 1 {
			cb.setState(stConnected)
		}
		cb.post()
	case cm.EventAddrError, cm.EventRouteError, cm.EventConnectError, cm.EventUnreachable, cm.EventRejected:
		if cb.o.prefix != "" {
			cb.errf("cma event %d, error %d\n", int(ev.Type), ev.Status)
		} else {
			cb.printf(cb.stderr, "cma event %s, error %d\n", ev.Type, ev.Status)
		}
		// rping leaves the state as it is (its CM thread then exits the
		// process); the waiter sees the unexpected state.
		cb.mu.Lock()
		cb.failed = true
		cb.mu.Unlock()
		cb.post()
	case cm.EventDisconnected:
		if cb.o.prefix != "" {
			cb.errf("DISCONNECT EVENT...\n")
		} else {
			cb.printf(cb.stderr, "%s DISCONNECT EVENT...\n", cb.role())
		}
		cb.setState(stDisconnected)
		cb.post()
	case cm.EventDeviceRemoval:
		cb.errf("cma detected device removal!!!!\n")
		cb.setState(stError)
		cb.post()
	case cm.EventTimewaitExit:
	default:
		cb.errf("unhandled event: %s, ignoring\n", ev.Type)
	}
}

// setupQP is rping_setup_qp: PD, completion channel, CQ (armed) and QP.
func (cb *rcb) setupQP(id *cm.ID) error {
	dev := id.Device()
	var err error
	if cb.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	cb.cc = dev.CreateCompChannel()
	depth := sqDepth
	if cb.o.txdepth > depth {
		depth = cb.o.txdepth
	}
	if cb.cq, err = dev.CreateCQ(depth*2, cb, cb.cc); err != nil {
		return err
	}
	if err = cb.cq.ReqNotify(false); err != nil {
		return err
	}
	if toolACKTimeout != 0 {
		id.SetACKTimeout(toolACKTimeout)
	}
	attr := &verbs.QPInitAttr{SendCQ: cb.cq, RecvCQ: cb.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if cb.o.selfQP {
		if cb.qp, err = cb.pd.CreateQP(attr); err != nil {
			return err
		}
		cb.own = true
		return cb.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	}
	cb.qp, err = id.CreateQP(cb.pd, attr)
	return err
}

func (cb *rcb) freeQP(id *cm.ID) {
	if cb.qp != nil {
		if cb.own {
			cb.qp.Destroy()
		} else {
			id.DestroyQP()
		}
	}
	if cb.cq != nil {
		cb.cq.Destroy()
	}
	if cb.pd != nil {
		cb.pd.Dealloc()
	}
}

// setupBuffers is rping_setup_buffers.
func (cb *rcb) setupBuffers() error {
	var err error
	cb.recvBuf = make([]byte, oob.RDMAInfoLen)
	cb.sendBuf = make([]byte, oob.RDMAInfoLen)
	if cb.recvMR, err = cb.pd.RegMR(cb.recvBuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if cb.sendMR, err = cb.pd.RegMR(cb.sendBuf, 0); err != nil {
		return err
	}
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	cb.rdmaBuf = make([]byte, cb.o.size)
	if cb.rdmaMR, err = cb.pd.RegMR(cb.rdmaBuf, rw); err != nil {
		return err
	}
	if cb.o.server != 1 || cb.o.prefix != "" { // krping's server has a start buffer too
		cb.startBuf = make([]byte, cb.o.size)
		if cb.startMR, err = cb.pd.RegMR(cb.startBuf, rw); err != nil {
			return err
		}
	}
	cb.debugf("allocated & registered buffers...\n")
	return nil
}

func (cb *rcb) freeBuffers() {
	for _, mr := range []*verbs.MR{cb.recvMR, cb.sendMR, cb.rdmaMR, cb.startMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
}

func (cb *rcb) postRecv() error {
	_, err := cb.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{{Addr: cb.recvMR.Addr(), Length: oob.RDMAInfoLen, LKey: cb.recvMR.LKey()}}}})
	return err
}

// postSendInfo sends the 16-byte send buffer (rping's sq_wr).
func (cb *rcb) postSendInfo() error {
	_, err := cb.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: cb.sendMR.Addr(), Length: oob.RDMAInfoLen, LKey: cb.sendMR.LKey()}}}})
	return err
}

// postRDMA posts an RDMA READ or WRITE of n bytes of rdma_buf to/from the peer's advertised buffer.
func (cb *rcb) postRDMA(op verbs.WROpcode, n int) error {
	_, err := cb.qp.PostSend([]verbs.SendWR{{Opcode: op, Flags: verbs.SendSignaled, RemoteAddr: cb.remoteAddr,
		RKey: cb.remoteRKey, SGList: []verbs.SGE{{Addr: cb.rdmaMR.Addr(), Length: uint32(n), LKey: cb.rdmaMR.LKey()}}}})
	return err
}

// formatSend is rping_format_send: advertise buf (in mr) in the send buffer.
func (cb *rcb) formatSend(mr *verbs.MR) {
	info := oob.RDMAInfo{Addr: mr.Addr(), RKey: mr.RKey(), Size: uint32(cb.o.size)}
	info.Append(cb.sendBuf[:0])
	cb.debugf("RDMA addr %x rkey %x len %d\n", info.Addr, info.RKey, info.Size)
}

// startCQThread runs rping's cq_thread.
func (cb *rcb) startCQThread() {
	if cb.polling {
		return // krping's latency and bandwidth tests poll the CQ themselves
	}
	ctx, cancel := context.WithCancel(context.Background())
	cb.cqCancel = cancel
	cb.cqDone = make(chan struct{})
	go func() {
		defer close(cb.cqDone)
		for {
			cq, err := cb.cc.GetCQEvent(ctx)
			if err != nil {
				return
			}
			if cq != cb.cq {
				cb.errf("Unknown CQ!\n")
				return
			}
			if cb.cq.ReqNotify(false) != nil {
				cb.errf("Failed to set notify!\n")
				return
			}
			ret := cb.cqHandler()
			cb.cq.AckEvents(1)
			if ret != 0 {
				return
			}
		}
	}()
}

// joinCQThread waits for the CQ thread to see the flush (or gives up
// after a while) and stops it.
func (cb *rcb) joinCQThread() {
	if cb.cqDone == nil {
		return
	}
	select {
	case <-cb.cqDone:
	case <-time.After(2 * time.Second):
	}
	cb.cqCancel()
	<-cb.cqDone
}

// cqHandler is rping_cq_event_handler: it returns 1 once a flushed
// completion shows the QP is down, -1 on error.
func (cb *rcb) cqHandler() int {
	if cb.polling {
		return 0
	}
	var wc [1]verbs.WC
	flushed := 0
	for cb.cq.Poll(wc[:]) == 1 {
		w := &wc[0]
		if w.WRID == probeWRID {
			if cb.probeDone(w) {
				return -1
			}
			continue
		}
		if w.Status == verbs.WCRetryExcErr {
			cb.lostOp(w)
			return -1
		}
		if w.Status != verbs.WCSuccess {
			if w.Status == verbs.WCWRFlushErr {
				flushed = 1
				continue
			}
			cb.errf("cq completion failed status %d\n", w.Status)
			cb.setCQErr()
			cb.setState(stError)
			cb.post()
			return -1
		}
		switch w.Opcode {
		case verbs.WCSend:
			cb.debugf("send completion\n")
		case verbs.WCRDMAWrite:
			cb.debugf("rdma write completion\n")
			cb.setState(stWriteComplete)
			cb.post()
		case verbs.WCRDMARead:
			cb.debugf("rdma read completion\n")
			cb.setState(stReadComplete)
			cb.post()
		case verbs.WCRecv:
			cb.debugf("recv completion\n")
			if w.ByteLen != oob.RDMAInfoLen {
				cb.errf("Received bogus data, size %d\n", w.ByteLen)
				cb.errf("recv wc error: %d\n", -1)
				cb.setState(stError)
				cb.post()
				return -1
			}
			cb.onRecv()
			if err := cb.postRecv(); err != nil {
				cb.errf("post recv error: %v\n", err)
				cb.setState(stError)
				cb.post()
				return -1
			}
			cb.post()
		default:
			cb.debugf("unknown!!!!! completion\n")
			cb.setState(stError)
			cb.post()
			return -1
		}
	}
	return flushed
}

// onRecv is server_recv / client_recv (krping: both roles record the
// peer's advertisement).
func (cb *rcb) onRecv() {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.o.server == 1 || cb.o.prefix != "" {
		info, _ := oob.ParseRDMAInfo(cb.recvBuf)
		cb.remoteRKey, cb.remoteAddr, cb.remoteLen = info.RKey, info.Addr, info.Size
	}
	if cb.o.server == 1 {
		cb.debugf("Received rkey %x addr %x len %d from peer\n", cb.remoteRKey, cb.remoteAddr, cb.remoteLen)
		if cb.state <= stConnected || cb.state == stWriteComplete {
			cb.state = stReadAdv
		} else {
			cb.state = stWriteAdv
		}
		return
	}
	if cb.state == stReadAdv {
		cb.state = stWriteAdv
	} else {
		cb.state = stWriteComplete
	}
}

// selfModifyQP is rping_self_modify_qp (-q): INIT, RTR, RTS from the CM's values.
func (cb *rcb) selfModifyQP(id *cm.ID) error {
	for _, s := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, m, err := id.InitQPAttr(s)
		if err != nil {
			return err
		}
		if err := cb.qp.Modify(a, m); err != nil {
			return err
		}
	}
	return nil
}

// connParam is rping_init_conn_param.
func (cb *rcb) connParam() *cm.ConnParam {
	p := &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if cb.own {
		p.QPNum = cb.qp.QPN()
	}
	return p
}

// flushQP moves the QP to ERR so that the CQ thread sees the flush and ends.
func (cb *rcb) flushQP() {
	if cb.qp != nil {
		cb.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	}
}

func (cb *rcb) disconnect(id *cm.ID) {
	if cb.own {
		cb.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	}
	id.Disconnect()
}

func (cb *rcb) acceptConn() int {
	cb.debugf("accepting client connection request\n")
	var err error
	if cb.own {
		if err = cb.selfModifyQP(cb.child); err == nil {
			err = cb.child.Accept(cb.connParam())
		}
	} else {
		err = cb.child.Accept(nil)
	}
	if err != nil {
		cb.errf("rdma_accept: %v\n", err)
		return -1
	}
	if cb.halfOpen != nil {
		// -P: bound the time a connection may stay half-open (REP sent, no
		// RTU), as a SYN backlog; spoofed REQs never send an RTU.
		d := 4 * cb.child.Agent().Config().Timeout
		t := time.NewTimer(d)
		select {
		case <-cb.sem:
			t.Stop()
		case <-t.C:
			cb.errf("rping: no RTU from %v within %v: dropping the half-open connection\n", cb.child.RemoteAddr(), d)
			return -1
		}
	} else {
		cb.wait()
	}
	// An error event (the REP unanswered: UNREACHABLE; the client gave up:
	// REJECTED, CONNECT_ERROR) leaves the state as it was; rping's CM thread
	// would exit the process. A -P server ends only this connection.
	if cb.getState() == stError || cb.isFailed() {
		cb.errf("wait for CONNECTED state %d\n", cb.getState())
		return -1
	}
	return 0
}

// isFailed reports whether an error event arrived for the connection.
func (cb *rcb) isFailed() bool {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.failed
}

func (cb *rcb) bindServer() int {
	a := cb.o.addr
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	if err := cb.id.BindAddr(netip.AddrPortFrom(a, uint16(cb.o.port))); err != nil {
		cb.errf("rdma_bind_addr: %v\n", err)
		return -1
	}
	cb.debugf("rdma_bind_addr successful\n")
	cb.debugf("rdma_listen\n")
	backlog := 3 // rping's
	if cb.o.persistent {
		// -P: the CM keeps maxHalfOpen connections waiting for their
		// RTU and drops the oldest for a newer one (UNREACHABLE), so that
		// spoofed REQs, which never answer the REP, cannot lock real
		// clients out. The kernel's backlog counts the requests whose
		// CONNECT_REQUEST rping has not read yet, which its CM thread
		// reads at once; softroce's counts them until they are accepted,
		// which a -P server does after setting each connection up in its
		// own goroutine: 3 would drop requests that come in a burst.
		cb.id.SetHalfOpen(maxHalfOpen)
		backlog = maxHalfOpen
	}
	if err := cb.id.Listen(backlog); err != nil {
		cb.errf("rdma_listen: %v\n", err)
		return -1
	}
	return 0
}

// serveConn sets up, accepts and runs one server connection (the body of
// rping_run_server after the CONNECT_REQUEST).
func (cb *rcb) serveConn(test func() int) int {
	var once sync.Once
	done := func() { // established, or torn down (-P)
		if cb.halfOpen != nil {
			once.Do(func() { cb.halfOpen.Add(-1) })
		}
	}
	defer done()
	accept := func() int {
		ret := cb.acceptConn()
		if ret == 0 {
			done()
		}
		return ret
	}
	destroy := func() { cb.child.Destroy() }
	return cb.session(cb.child, "server", accept, destroy, test, destroy)
}

// session is the frame the server's connection and the client share around
// test: set up the QP on id and the buffers, post the first receive, start
// the CQ thread, connect (failed cleans up after a failed connect before
// the CQ thread is flushed), run test, disconnect, then end.
func (cb *rcb) session(id *cm.ID, side string, connect func() int, failed func(), test func() int, end func()) int {
	defer cb.freeQP(id)
	if err := cb.setupQP(id); err != nil {
		cb.errf("setup_qp failed: %v\n", err)
		return -1
	}
	defer cb.freeBuffers()
	if err := cb.setupBuffers(); err != nil {
		cb.errf("rping_setup_buffers failed: %v\n", err)
		return -1
	}
	if err := cb.postRecv(); err != nil {
		cb.errf("ibv_post_recv failed: %v\n", err)
		return -1
	}
	cb.startCQThread()
	if ret := connect(); ret != 0 {
		cb.errf("connect error %d\n", ret)
		failed()
		cb.flushQP()
		cb.joinCQThread()
		return ret
	}
	cb.setTesting(true)
	ret := test()
	cb.setTesting(false)
	if ret != 0 {
		cb.errf("%s %s failed: %d\n", cb.tool(), side, ret)
	}
	cb.disconnect(id)
	cb.joinCQThread()
	end()
	return ret
}

func (cb *rcb) tool() string {
	if cb.o.prefix != "" {
		return "krping"
	}
	return "rping"
}

func (cb *rcb) runServer() int {
	if ret := cb.awaitConnect(); ret != 0 {
		return ret
	}
	return cb.serveConn(cb.testServer)
}

// awaitConnect binds the listener and waits for the first connection
// request (rping's and krping's server before their tests).
func (cb *rcb) awaitConnect() int {
	if ret := cb.bindServer(); ret != 0 {
		return ret
	}
	cb.wait()
	if s := cb.getState(); s != stConnectRequest {
		cb.errf("wait for CONNECT_REQUEST state %d\n", s)
		return -1
	}
	return 0
}

// runPersistentServer serves connections one after the other forever, each
// in its own goroutine (rping -P).
func (cb *rcb) runPersistentServer() int {
	if ret := cb.bindServer(); ret != 0 {
		return ret
	}
	for {
		cb.wait()
		if s := cb.getState(); s != stConnectRequest {
			cb.errf("wait for CONNECT_REQUEST state %d\n", s)
			return -1
		}
		c := newRCB(cb.o, cb.stdout, cb.stderr, cb.outMu)
		c.ch, c.id, c.child = cb.ch, cb.id, cb.child
		c.child.Context = c
		cb.setState(stIdle)
		if cb.halfOpen == nil {
			cb.halfOpen = new(atomic.Int32)
		}
		c.halfOpen = cb.halfOpen
		if c.halfOpen.Add(1) > maxPending {
			// Too many connections neither established nor torn down
			// yet (the CM drops the oldest half-open ones for newer
			// ones, and their teardown lags): refuse this one rather
			// than grow without bound.
			c.halfOpen.Add(-1)
			c.child.Reject(nil)
			c.child.Destroy()
			cb.accept <- struct{}{}
			continue
		}
		cb.accept <- struct{}{}
		go c.serveConn(c.testServer)
	}
}

// maxHalfOpen bounds a -P server's half-open connections (REP sent, no
// RTU): the CM drops the oldest for a newer one (cm.ID.SetHalfOpen); and its
// requests being set up, not accepted yet (the listen backlog).
// maxPending bounds its connections from CONNECT_REQUEST until
// ESTABLISHED or torn down: those half-open, being set up, and being torn
// down after the CM dropped them; a request beyond is rejected.
const (
	maxHalfOpen = 64
	maxPending  = 3 * maxHalfOpen
)

// testServer is rping_test_server.
func (cb *rcb) testServer() int {
	for {
		cb.wait()
		if s := cb.getState(); s != stReadAdv {
			cb.errf("wait for RDMA_READ_ADV state %d\n", s)
			return cb.endRet(-1)
		}
		cb.debugf("server received sink adv\n")
		if err := cb.postRDMA(verbs.WRRDMARead, int(min(cb.remoteLen, uint32(len(cb.rdmaBuf))))); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.endRet(-1)
		}
		cb.debugf("server posted rdma read req \n")
		cb.wait()
		if s := cb.getState(); s != stReadComplete {
			cb.errf("wait for RDMA_READ_COMPLETE state %d\n", s)
			return cb.endRet(-1)
		}
		cb.debugf("server received read complete\n")
		if cb.o.verbose {
			cb.printf(cb.stdout, "%sserver ping data: %s\n", cb.o.prefix, cstr(cb.rdmaBuf))
		}
		if err := cb.postSendInfo(); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.endRet(-1)
		}
		cb.debugf("server posted go ahead\n")
		cb.wait()
		if s := cb.getState(); s != stWriteAdv {
			cb.errf("wait for RDMA_WRITE_ADV state %d\n", s)
			return cb.endRet(-1)
		}
		cb.debugf("server received sink adv\n")
		n := len(cstr(cb.rdmaBuf)) + 1
		n = min(n, len(cb.rdmaBuf))
		cb.debugf("rdma write from lkey %x laddr %x len %d\n", cb.rdmaMR.LKey(), cb.rdmaMR.Addr(), n)
		if err := cb.postRDMA(verbs.WRRDMAWrite, n); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.endRet(-1)
		}
		cb.wait()
		if s := cb.getState(); s != stWriteComplete {
			cb.errf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			return cb.endRet(-1)
		}
		cb.debugf("server rdma write complete \n")
		if err := cb.postSendInfo(); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.endRet(-1)
		}
		cb.debugf("server posted go ahead\n")
	}
}

// endRet is rping's "return (cb->state == DISCONNECTED) ? 0 : ret", except
// that a failed completion is a failure even when the peer disconnected.
func (cb *rcb) endRet(ret int) int {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.state == stDisconnected && !cb.cqErr {
		return 0
	}
	return ret
}

// clientEndRet is endRet for a client with a ping count: stopping short
// of it (the server went away) is a failure, where rping exits 0.
func (cb *rcb) clientEndRet(ret int) int {
	if cb.o.count > 0 {
		return ret
	}
	return cb.endRet(ret)
}

func (cb *rcb) setTesting(on bool) {
	cb.mu.Lock()
	cb.testing = on
	cb.mu.Unlock()
}

func (cb *rcb) setCQErr() {
	cb.mu.Lock()
	cb.cqErr = true
	cb.mu.Unlock()
}

// bindClient is rping_bind_client: resolve address and route.
func (cb *rcb) bindClient() int {
	var src netip.AddrPort
	if cb.o.src.IsValid() {
		src = netip.AddrPortFrom(cb.o.src, 0)
	}
	if err := cb.id.ResolveAddr(src, netip.AddrPortFrom(cb.o.addr, uint16(cb.o.port)), cmTimeout); err != nil {
		cb.errf("rdma_resolve_addr: %v\n", err)
		return -1
	}
	cb.wait()
	if s := cb.getState(); s != stRouteResolved {
		cb.errf("waiting for addr/route resolution state %d\n", s)
		return -1
	}
	cb.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	return 0
}

func (cb *rcb) connectClient() int {
	if err := cb.id.Connect(cb.connParam()); err != nil {
		cb.errf("rdma_connect: %v\n", err)
		return -1
	}
	cb.waitSaying(cb.id.Agent().Config().Timeout, cb.connectWaitLine)
	if s := cb.getState(); s != stConnected {
		cb.errf("wait for CONNECTED state %d\n", s)
		return -1
	}
	if cb.own {
		if err := cb.selfModifyQP(cb.id); err != nil {
			cb.errf("rping_modify_qp: %v\n", err)
			return -1
		}
		if err := cb.id.Establish(); err != nil {
			cb.errf("rdma_establish: %v\n", err)
			return -1
		}
	}
	cb.debugf("rdma_connect successful\n")
	return 0
}

// clientSession runs rping_run_client's frame around test.
func (cb *rcb) clientSession(test func() int) int {
	if ret := cb.bindClient(); ret != 0 {
		return ret
	}
	return cb.session(cb.id, "client", cb.connectClient, func() {}, test, func() {
		// Let the DREP arrive so DISCONNECTED is reported, as rping shows it.
		for end := time.Now().Add(2 * time.Second); cb.getState() != stDisconnected && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	})
}

// waitSaying is wait, printing line() to stderr once if nothing happens
// for d: what the tool is waiting for, where rping would stay silent.
func (cb *rcb) waitSaying(d time.Duration, line func() string) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cb.sem:
		return
	case <-t.C:
		cb.errf("%s\n", line())
	}
	cb.wait()
}

// connectWaitLine says that the server's CM has not answered the REQ yet.
func (cb *rcb) connectWaitLine() string {
	cfg := cb.id.Agent().Config()
	who := "rping: " // krping's errf adds "krping: "
	if cb.o.prefix != "" {
		who = ""
	}
	return fmt.Sprintf("%sno answer yet from %v: waiting for its connection manager to answer the connection request "+
		"(resent every %.1f s; UNREACHABLE after %.0f s)", who, cb.id.RemoteAddr(), cfg.Timeout.Seconds(),
		cfg.GiveUpAfter().Seconds())
}

func (cb *rcb) runClient() int { return cb.clientSession(cb.testClient) }

// testClient is rping_test_client.
func (cb *rcb) testClient() int {
	for ping := 0; cb.o.count == 0 || ping < cb.o.count; ping++ {
		cb.setState(stReadAdv)
		oob.RpingFill(cb.startBuf, ping)
		cb.formatSend(cb.startMR)
		if err := cb.postSendInfo(); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.clientEndRet(-1)
		}
		cb.wait()
		if s := cb.getState(); s != stWriteAdv {
			cb.errf("wait for RDMA_WRITE_ADV state %d\n", s)
			return cb.clientEndRet(-1)
		}
		cb.formatSend(cb.rdmaMR)
		if err := cb.postSendInfo(); err != nil {
			cb.errf("post send error %v\n", err)
			return cb.clientEndRet(-1)
		}
		cb.wait()
		if s := cb.getState(); s != stWriteComplete {
			cb.errf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			return cb.clientEndRet(-1)
		}
		if cb.o.validate && !bytes.Equal(cb.startBuf, cb.rdmaBuf) {
			cb.errf("data mismatch!\n")
			return cb.clientEndRet(-1)
		}
		if cb.o.verbose {
			cb.printf(cb.stdout, "%sping data: %s\n", cb.o.prefix, cstr(cb.rdmaBuf))
		}
	}
	return cb.endRet(0)
}
