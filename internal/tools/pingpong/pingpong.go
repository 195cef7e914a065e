// Package pingpong is the ping-pong tools: rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong over softroce
// devices, with their flags, their TCP exchange (cm/oob) and their printed
// lines. Its commands register themselves with the softroce command table.
package pingpong

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

type qpKind int

const (
	kindRC qpKind = iota
	kindUC
	kindUD
	kindSRQ
)

var tools = []struct {
	name    string
	kind    qpKind
	summary string
}{
	{"rc_pingpong", kindRC, "RC SEND/RECV ping-pong, like ibv_rc_pingpong"},
	{"uc_pingpong", kindUC, "UC SEND/RECV ping-pong, like ibv_uc_pingpong"},
	{"ud_pingpong", kindUD, "UD SEND/RECV ping-pong, like ibv_ud_pingpong"},
	{"srq_pingpong", kindSRQ, "RC ping-pong on several QPs sharing an SRQ, like ibv_srq_pingpong"},
}

func init() {
	for _, t := range tools {
		t := t
		cli.Register(&cli.Command{Name: t.name, Summary: t.summary, Run: func(args []string, stdout, stderr io.Writer) int {
			return runPingpong(t.name, t.kind, args, stdout, stderr)
		}})
	}
}

// Work request IDs, as the C tools use them (bits of "pending").
const (
	recvWRID = 1
	sendWRID = 2
)

// qKey is the Q_Key of ibv_ud_pingpong.
const qKey = 0x11111111

// defPeerTimeout is the default --peer-timeout. A live peer answers within
// the transport's retry budget (timeout 14, retry 7: verbs.RetryBudget, at
// most 1.68 s); rdma-core's
// tools wait forever.
const defPeerTimeout = 5 * time.Second

// pageSize is the page size of the -c pattern (sysconf(_SC_PAGESIZE) on
// the machines the real tools run on).
const pageSize = 4096

type config struct {
	tool      string
	kind      qpKind
	tcpPort   int
	dev       string
	ibPort    int
	size      int
	mtu       int
	rxDepth   int
	iters     int
	sl        int
	events    bool
	gidx      int
	validate  bool
	numQP     int
	pcap      string
	server    string // host to connect to; "" for the server
	connectTO time.Duration
	// peerTimeout ends a run in which no completion arrives for this long
	// (a peer killed while this side waits for its next message).
	peerTimeout time.Duration
}

func usage(c *config, w io.Writer) {
	def := 4096
	if c.kind == kindUD {
		def = 2048
	}
	fmt.Fprintf(w, `Usage:
  softroce %[1]s            start a server and wait for connection
  softroce %[1]s <host>     connect to server at <host>

Options:
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use device <dev>: a link, netdev or IP (default: the only link, else loopback)
  -i, --ib-port=<port>   use port <port> of the device (default 1, the only port)
  -s, --size=<size>      size of message to exchange (default %[2]d)
`, c.tool, def)
	if c.kind != kindUD {
		fmt.Fprintln(w, "  -m, --mtu=<size>       path MTU (default 1024)")
	}
	if c.kind == kindSRQ {
		fmt.Fprintln(w, "  -q, --num-qp=<num>     use <num> queue pairs for test (default 16)")
	}
	fmt.Fprintf(w, `  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (default 1, the IP address;
                         rdma-core's default, no GID, cannot work over RoCE)
  -c, --chk              validate received buffer
      --pcap=<file>      write the device's RoCEv2 traffic to a pcap file
      --peer-timeout=<d> fail when no completion arrives for <d> during the
                         exchanges: the peer is gone (default 5s; 0: wait forever)
`)
}

func runPingpong(tool string, kind qpKind, args []string, stdout, stderr io.Writer) int {
	c := &config{tool: tool, kind: kind, tcpPort: oob.DefaultPort, ibPort: 1, size: 4096, mtu: 1024,
		rxDepth: 500, iters: 1000, gidx: 1, numQP: 16, connectTO: 10 * time.Second, peerTimeout: defPeerTimeout}
	if kind == kindUD {
		// ibv_ud_pingpong sends 1024-byte messages by default (rdma-core
		// 44's ud_pingpong.c: size = 1024), though its usage says 2048;
		// the usage below repeats its text, the default is its behaviour.
		c.size = 1024
	}
	g := cli.Getopt{Prog: "softroce " + tool}
	g.Num('p', "port", &c.tcpPort)
	g.Str('d', "ib-dev", &c.dev)
	g.Num('i', "ib-port", &c.ibPort)
	g.Num('s', "size", &c.size)
	if kind != kindUD {
		g.Num('m', "mtu", &c.mtu)
	}
	g.Num('r', "rx-depth", &c.rxDepth)
	g.Num('n', "iters", &c.iters)
	g.Num('l', "sl", &c.sl)
	g.Flag('e', "events", &c.events)
	g.Num('g', "gid-idx", &c.gidx)
	g.Flag('c', "chk", &c.validate)
	if kind == kindSRQ {
		g.Num('q', "num-qp", &c.numQP)
	}
	g.Str(0, "pcap", &c.pcap)
	g.Refuse('o', "odp", false, "softroce registers ordinary Go memory; on-demand paging does not apply")
	g.Refuse('O', "iodp", false, "softroce has no implicit on-demand paging")
	g.Refuse('P', "prefetch", false, "softroce has no on-demand paging to prefetch")
	g.Refuse('t', "ts", false, "softroce completions carry no hardware timestamps")
	g.Refuse('j', "dm", false, "softroce has no device memory")
	var newSend bool
	g.Flag('N', "new_send", &newSend) // the ibv_wr_* API: identical traffic, nothing to change
	g.DurOrZero(0, "peer-timeout", &c.peerTimeout)
	ops, code, ok := g.ParseArgs(args, stdout, stderr, func(w io.Writer) { usage(c, w) })
	if !ok {
		return code
	}
	switch len(ops) {
	case 0:
	case 1:
		c.server = ops[0]
	default:
		return cli.UsageErr(stderr, g.Prog, "one server host at most, got %q", ops)
	}
	if msg := c.check(); msg != "" {
		return cli.UsageErr(stderr, g.Prog, "%s", msg)
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	defer toolkit.OneProc()()
	ctx, cancel := toolkit.SignalContext()
	defer cancel()
	if err := runConfig(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

func (c *config) check() string {
	switch {
	case c.tcpPort < 0 || c.tcpPort > 65535:
		return "port must be 0..65535"
	case c.ibPort != 1:
		return fmt.Sprintf("port %d: softroce devices have one port, 1", c.ibPort)
	case c.size < 1 || c.size > 1<<30:
		return "size must be 1..1073741824"
	case c.kind != kindUD && verbs.MTU(toolkit.MTUEnum(c.mtu)) == 0:
		return fmt.Sprintf("mtu %d: must be 256, 512, 1024, 2048 or 4096", c.mtu)
	case c.rxDepth < 1 || c.rxDepth > 16384:
		return "rx-depth must be 1..16384"
	case c.iters < 1:
		return "iters must be at least 1"
	case c.sl < 0 || c.sl > 15:
		return "sl must be 0..15"
	case c.gidx < 0:
		return "a GID index is required over RoCE: without a GRH (rdma-core's default -g -1) the QPs cannot be addressed; use -g 1 (the IP address) or -g 0 (link-local)"
	case c.kind == kindSRQ && (c.numQP < 1 || c.numQP > oob.SRQPingpongMaxQP):
		return fmt.Sprintf("num-qp must be 1..%d", oob.SRQPingpongMaxQP)
	case c.kind == kindSRQ && c.numQP > c.rxDepth:
		return fmt.Sprintf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP.", c.rxDepth, c.numQP)
	}
	return ""
}

// pingCtx is struct pingpong_context.
type pingCtx struct {
	c       *config
	td      *toolkit.ToolDevice
	dev     *verbs.Device
	buf     []byte
	pd      *verbs.PD
	mr      *verbs.MR
	ch      *verbs.CompChannel
	cq      *verbs.CQ
	srq     *verbs.SRQ
	qps     []*verbs.QP
	ahs     []*verbs.AH
	flags   verbs.SendFlags
	local   []oob.PingpongDest
	remote  []oob.PingpongDest
	pending []int
	qpIndex map[uint32]int
	sendWR  [1]verbs.SendWR
	sendSGE [1]verbs.SGE
	recvWR  [1]verbs.RecvWR
	recvSGE [1]verbs.SGE
	// watchdog fires after --peer-timeout without a completion.
	watchdog *time.Timer
}

// runConfig runs one side of a ping-pong on the device -d names.
func runConfig(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	return toolkit.WithDevice(c.dev, c.pcap, func(td *toolkit.ToolDevice) error {
		return runOn(ctx, c, td, stdout)
	})
}

// runOn runs one side of a ping-pong on the open device td.
func runOn(ctx context.Context, c *config, td *toolkit.ToolDevice, stdout io.Writer) error {
	p := &pingCtx{c: c, td: td, dev: td.Dev, flags: verbs.SendSignaled, qpIndex: map[uint32]int{}}
	if err := p.init(); err != nil {
		return err
	}
	// Post the receives before anything can arrive.
	routs, err := p.postRecv(c.rxDepth)
	if err != nil || routs < c.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d): %v", routs, err)
	}
	if c.events {
		if err := p.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	if _, err := p.dev.QueryPort(uint8(c.ibPort)); err != nil {
		return fmt.Errorf("Couldn't get port info: %w", err)
	}
	gid, err := td.GID(c.gidx)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", c.gidx, err)
	}
	p.local = make([]oob.PingpongDest, len(p.qps))
	for i, qp := range p.qps {
		p.local[i] = oob.PingpongDest{QPN: qp.QPN(), PSN: toolkit.RandPSN(), GID: gid}
		d := &p.local[i]
		sep := ","
		if c.kind == kindUD {
			sep = ":" // ibv_ud_pingpong prints "PSN 0x...: GID"
		}
		fmt.Fprintf(stdout, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			d.LID, d.QPN, d.PSN, sep, netip.AddrFrom16(d.GID))
	}
	if err := p.exchange(ctx); err != nil {
		return err
	}
	for i := range p.qps {
		d := &p.remote[i]
		fmt.Fprintf(stdout, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
	}
	if c.server != "" {
		if err := p.connectAll(); err != nil {
			return err
		}
	}
	for i := range p.pending {
		p.pending[i] = recvWRID
	}
	if c.server != "" {
		if c.validate {
			p.fillPattern()
		}
		for i := range p.qps {
			if err := p.postSend(i); err != nil {
				return fmt.Errorf("Couldn't post send: %w", err)
			}
			p.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	if err := p.loop(ctx, routs); err != nil {
		return err
	}
	usec := float64(time.Since(start).Nanoseconds()) / 1e3
	bytes := int64(c.size) * int64(c.iters) * 2
	fmt.Fprintf(stdout, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(stdout, "%d iters in %.2f seconds = %.2f usec/iter\n", c.iters, usec/1e6, usec/float64(c.iters))
	if c.validate {
		if bad := p.checkPattern(stdout); bad {
			return errors.New("validation failed: the received buffer differs from the pattern (-c)")
		}
	}
	return nil
}

func (p *pingCtx) init() error {
	c := p.c
	n := c.size
	if c.kind == kindUD {
		n += toolkit.GRHLen
		mtu := p.dev.ActiveMTU().Bytes()
		if c.size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
	}
	p.buf = make([]byte, n)
	for i := range p.buf {
		p.buf[i] = p.fillByte()
	}
	// The channel serves -e, and parks the poller between bursts (toolkit.CQWaiter).
	p.ch = p.dev.CreateCompChannel()
	var err error
	if p.pd, err = p.dev.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	cqe := c.rxDepth + 1
	nqp := 1
	if c.kind == kindSRQ {
		nqp = c.numQP
		cqe = c.rxDepth + nqp
	}
	if p.cq, err = p.dev.CreateCQ(cqe, nil, p.ch); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	typ := verbs.QPTypeRC
	switch c.kind {
	case kindUC:
		typ = verbs.QPTypeUC
	case kindUD:
		typ = verbs.QPTypeUD
	}
	ia := &verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if c.kind == kindSRQ {
		if p.srq, err = p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(c.rxDepth), MaxSGE: 1}, nil); err != nil {
			return fmt.Errorf("Couldn't create SRQ: %w", err)
		}
		ia.SRQ = p.srq
		ia.Cap.MaxRecvWR = 0
	}
	for i := 0; i < nqp; i++ {
		qp, err := p.pd.CreateQP(ia)
		if err != nil {
			return fmt.Errorf("Couldn't create QP[%d]: %w", i, err)
		}
		if _, init := qp.Query(); int(init.Cap.MaxInlineData) >= c.size {
			p.flags |= verbs.SendInline
		}
		a := &verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: uint8(c.ibPort), QKey: qKey}
		m := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if typ == verbs.QPTypeUD {
			m |= verbs.QPAttrQKey
		} else {
			m |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(a, m); err != nil {
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		p.qpIndex[qp.QPN()] = i
		p.qps = append(p.qps, qp)
	}
	p.pending = make([]int, nqp)
	p.ahs = make([]*verbs.AH, nqp)
	// Reusable work requests (posting does not allocate).
	p.recvSGE[0] = verbs.SGE{Addr: p.mr.Addr(), Length: uint32(len(p.buf)), LKey: p.mr.LKey()}
	p.recvWR[0] = verbs.RecvWR{WRID: recvWRID, SGList: p.recvSGE[:]}
	off := uint64(0)
	if c.kind == kindUD {
		off = toolkit.GRHLen
	}
	p.sendSGE[0] = verbs.SGE{Addr: p.mr.Addr() + off, Length: uint32(c.size), LKey: p.mr.LKey()}
	p.sendWR[0] = verbs.SendWR{WRID: sendWRID, SGList: p.sendSGE[:], Opcode: verbs.WRSend, Flags: p.flags}
	return nil
}

// postRecv posts up to n receives and returns how many were posted.
func (p *pingCtx) postRecv(n int) (int, error) {
	for i := 0; i < n; i++ {
		var err error
		if p.srq != nil {
			_, err = p.srq.PostRecv(p.recvWR[:])
		} else {
			_, err = p.qps[0].PostRecv(p.recvWR[:])
		}
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

func (p *pingCtx) postSend(i int) error {
	wr := &p.sendWR[0]
	if p.c.kind == kindUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.ahs[i], p.remote[i].QPN, qKey
	}
	_, err := p.qps[i].PostSend(p.sendWR[:])
	return err
}

// exchange runs the TCP exchange of addresses (cm/oob) in the tool's role.
func (p *pingCtx) exchange(ctx context.Context) error {
	c := p.c
	count := len(p.local)
	if c.kind == kindSRQ {
		count = oob.SRQPingpongMaxQP
	}
	if c.server != "" {
		conn, err := toolkit.Dial(ctx, c.server, c.tcpPort, c.connectTO)
		if err != nil {
			return err
		}
		defer conn.Close()
		r, err := oob.ClientExchangeMulti(ctx, conn, p.local, count)
		if err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
		p.remote = r[:len(p.local)]
		return nil
	}
	lc := net.ListenConfig{}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(c.tcpPort)))
	if err != nil {
		return fmt.Errorf("Couldn't listen to port %d: %w", c.tcpPort, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while waiting for a client on port %d", c.tcpPort)
		}
		return fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	r, err := oob.ServerExchangeMulti(ctx, conn, p.local, count, func(r []oob.PingpongDest) error {
		p.remote = r[:len(p.local)]
		if err := p.connectAll(); err != nil {
			return fmt.Errorf("Couldn't connect to remote QP: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.remote = r[:len(p.local)]
	return nil
}

func (p *pingCtx) connectAll() error {
	for i := range p.qps {
		if err := p.connect(i); err != nil {
			return err
		}
	}
	return nil
}

// connect is pp_connect_ctx: RTR and RTS with the tools' attributes.
func (p *pingCtx) connect(i int) error {
	c, qp, dest := p.c, p.qps[i], &p.remote[i]
	if binary.BigEndian.Uint64(dest.GID[8:]) == 0 {
		return fmt.Errorf("remote QP 0x%06x sent no GID (was the peer started without -g?): RoCE needs a GID on both sides", dest.QPN)
	}
	ah := verbs.AHAttr{IsGlobal: true, SL: uint8(c.sl), PortNum: uint8(c.ibPort),
		GRH: verbs.GlobalRoute{DGID: dest.GID, SGIDIndex: uint8(c.gidx), HopLimit: 1}}
	if c.kind == kindUD {
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return fmt.Errorf("Failed to modify QP to RTR: %w", err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: p.local[i].PSN},
			verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
		a, err := p.pd.CreateAH(&ah)
		if err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		p.ahs[i] = a
		return nil
	}
	a := &verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: toolkit.MTUEnum(c.mtu), DestQPNum: dest.QPN, RQPSN: dest.PSN,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: ah}
	m := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if c.kind != kindUC {
		m |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := qp.Modify(a, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	a = &verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: p.local[i].PSN, MaxRdAtomic: 1}
	m = verbs.QPAttrState | verbs.QPAttrSQPSN
	if c.kind != kindUC {
		m |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := qp.Modify(a, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

func (p *pingCtx) loop(ctx context.Context, routs int) error {
	c := p.c
	threshold := 1
	if c.kind == kindSRQ {
		threshold = c.numQP
	}
	var wc [2]verbs.WC
	rcnt, scnt := 0, 0
	// The peer watchdog: with no completion for peerTimeout, the waits below
	// end (rdma-core's tools would wait forever for a killed peer).
	var silent atomic.Bool
	if c.peerTimeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		dog := time.AfterFunc(c.peerTimeout, func() { silent.Store(true); stop() })
		defer dog.Stop()
		p.watchdog = dog
	}
	peerGone := func(err error) error {
		if silent.Load() {
			return fmt.Errorf("no completion for %v after %d sends and %d receives of %d: the peer stopped answering (killed?)",
				c.peerTimeout, scnt, rcnt, c.iters)
		}
		return err
	}
	w := toolkit.CQWaiter{Ctx: ctx, CQ: p.cq, Ch: p.ch, Spin: toolkit.LatencySpin}
	numEvents := 0
	defer func() {
		if numEvents > 0 {
			p.cq.AckEvents(numEvents)
		}
	}()
	for rcnt < c.iters || scnt < c.iters {
		if c.events {
			cq, err := p.ch.GetCQEvent(ctx)
			if err != nil {
				return peerGone(fmt.Errorf("Failed to get cq_event: %w", err))
			}
			numEvents++
			if cq != p.cq {
				return errors.New("CQ event for unknown CQ")
			}
			if err := p.cq.ReqNotify(false); err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
		}
		ne := p.cq.Poll(wc[:])
		if ne == 0 {
			if !c.events {
				if err := w.Idle(); err != nil {
					return peerGone(err)
				}
			}
			continue
		}
		w.Progress()
		if p.watchdog != nil {
			p.watchdog.Reset(c.peerTimeout)
		}
		for i := range wc[:ne] {
			e := &wc[i]
			if e.Status != verbs.WCSuccess {
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", e.Status, e.Status, e.WRID)
			}
			qi, ok := p.qpIndex[e.QPNum]
			if !ok {
				return fmt.Errorf("Completion for unknown QP 0x%06x", e.QPNum)
			}
			switch e.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				routs--
				if routs <= threshold {
					n, err := p.postRecv(c.rxDepth - routs)
					routs += n
					if routs < c.rxDepth {
						return fmt.Errorf("Couldn't post receive (%d): %v", routs, err)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", e.WRID)
			}
			p.pending[qi] &^= int(e.WRID)
			if scnt < c.iters && p.pending[qi] == 0 {
				if err := p.postSend(qi); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				p.pending[qi] = recvWRID | sendWRID
			}
		}
	}
	return nil
}

// payload returns the part of the buffer messages carry (after the GRH
// room for UD).
func (p *pingCtx) payload() []byte {
	if p.c.kind == kindUD {
		return p.buf[toolkit.GRHLen:]
	}
	return p.buf
}

// fillByte is the byte rdma-core's tools fill their buffer with: 0x7b in
// ibv_rc/uc/ud_pingpong, 0 in ibv_srq_pingpong.
func (p *pingCtx) fillByte() byte {
	if p.c.kind == kindSRQ {
		return 0
	}
	return 0x7b
}

// fillPattern is the client's -c preparation, as rdma-core does it: the
// first byte of every page is set to i / page_size % sizeof(char), which
// is 0; the rest of the buffer keeps its fill (fillByte).
func (p *pingCtx) fillPattern() {
	b := p.payload()
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
}

// checkPattern validates the received buffer. rdma-core's server checks
// the first byte of each page ("invalid data in page N"); softroce checks
// every byte of the message against the same image (0 at page starts,
// fillByte elsewhere), on both sides, and fails the run on a mismatch.
func (p *pingCtx) checkPattern(w io.Writer) bool {
	b := p.payload()[:p.c.size]
	bad := false
	for i := 0; i < len(b); i += pageSize {
		if b[i] != 0 {
			fmt.Fprintf(w, "invalid data in page %d\n", i/pageSize)
			bad = true
		}
	}
	fill := p.fillByte()
	for i, v := range b {
		if i%pageSize != 0 && v != fill {
			fmt.Fprintf(w, "invalid data at byte %d (page %d): 0x%02x, want 0x%02x\n", i, i/pageSize, v, fill)
			bad = true
			break
		}
	}
	return bad
}
