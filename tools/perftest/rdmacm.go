package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

// perftest -R (--rdma_cm), as perftest 4.5+0.17 does it (../shared/captures
// write_bw_rdmacm.pcap):
//
//  1. A first rdma_cm connection to the server's port -p (default 18515)
//     carries the side channel: an RC QP with one send and one receive WR,
//     responder resources and initiator depth 0, retry and RNR retry 7, no
//     private data. Each side posts one 56-byte receive before connecting
//     and reposts it after every message.
//  2. Every exchange of the TCP side channel (versions, system data, MTU,
//     addresses, BW report) becomes one SEND each way on it, client first,
//     each waiting for its send completion; an address is perftest's struct
//     pingpong_dest in 56 big-endian bytes (cmDestLen) instead of text.
//  3. After the banner, one all-zero address handshake, then one rdma_cm
//     connection per test QP to the same port (the QP the CM creates and
//     moves to RTS is the traffic QP), then another all-zero handshake.
//  4. The address handshakes, traffic and report as over TCP; the closing
//     handshake has no "done" message. The client then disconnects the
//     traffic connections and the side channel (DREQ), in that order.
//
// With -z (--com_rdma_cm) only steps 1, 2 and 4 apply: the test QPs are
// created and connected as without it, from the exchanged addresses.

// cmDestLen is sizeof(struct pingpong_dest) on x86-64: lid, out_reads,
// qpn, psn, rkey (4 bytes each), 4 bytes of padding, vaddr (8), gid (16),
// srqn and gid_index (4 each), each integer big-endian (perftest's
// rdma_write_keys with HAVE_ENDIAN).
const cmDestLen = 56

// errCMMsg reports a side-channel message of the wrong size or kind.
var errCMMsg = errors.New("malformed rdma_cm side-channel message")

// appendCMDest appends d as the 56-byte message; gidIndex is the sender's
// GID index (perftest's my_dest.gid_index; 0 in the all-zero handshakes).
func appendCMDest(b []byte, d *oob.PerftestDest, gidIndex int32) []byte {
	var m [cmDestLen]byte
	binary.BigEndian.PutUint32(m[0:], uint32(d.LID))
	binary.BigEndian.PutUint32(m[4:], uint32(d.OutReads))
	binary.BigEndian.PutUint32(m[8:], d.QPN)
	binary.BigEndian.PutUint32(m[12:], d.PSN)
	binary.BigEndian.PutUint32(m[16:], d.RKey)
	binary.BigEndian.PutUint64(m[24:], d.VAddr)
	copy(m[32:48], d.GID[:])
	binary.BigEndian.PutUint32(m[48:], d.SRQN)
	binary.BigEndian.PutUint32(m[52:], uint32(gidIndex))
	return append(b, m[:]...)
}

// parseCMDest decodes a 56-byte address message. Like perftest's
// rdma_read_keys it keeps the low bits of each field.
func parseCMDest(b []byte) (oob.PerftestDest, int32, error) {
	var d oob.PerftestDest
	if len(b) < cmDestLen {
		return d, 0, fmt.Errorf("%w: address of %d bytes, want %d", errCMMsg, len(b), cmDestLen)
	}
	d.LID = uint16(binary.BigEndian.Uint32(b[0:]))
	d.OutReads = uint16(binary.BigEndian.Uint32(b[4:]))
	d.QPN = binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF
	d.PSN = binary.BigEndian.Uint32(b[12:]) & 0xFFFFFF
	d.RKey = binary.BigEndian.Uint32(b[16:])
	d.VAddr = binary.BigEndian.Uint64(b[24:])
	copy(d.GID[:], b[32:48])
	d.SRQN = binary.BigEndian.Uint32(b[48:])
	return d, int32(binary.BigEndian.Uint32(b[52:])), nil
}

// msgPipe moves whole messages: one SEND and one receive completion each.
type msgPipe interface {
	send(ctx context.Context, msg []byte) error
	// recv fills in with the next message and returns its length.
	recv(ctx context.Context, in []byte) (int, error)
}

// cmSide is perftest's side channel over an rdma_cm connection
// (ctx_xchg_data_rdma, rdma_write_keys/rdma_read_keys). It has the
// methods of oob.PerftestConn that runConfig uses.
type cmSide struct {
	p        msgPipe
	client   bool
	gidIndex int32 // sent in every address message but the all-zero ones
	remVer   float64
	buf      [cmDestLen]byte
	out      [cmDestLen]byte
}

// sideChannel is the side channel of a run: oob.PerftestConn (TCP) or cmSide.
type sideChannel interface {
	Setup(ctx context.Context, sys oob.SysData, mtu int) (oob.SysData, int, error)
	HandShake(ctx context.Context, local *oob.PerftestDest) (oob.PerftestDest, error)
	Connect(ctx context.Context, local []oob.PerftestDest, connect func([]oob.PerftestDest) error) ([]oob.PerftestDest, error)
	ExchangeBWReport(ctx context.Context, local oob.BWReport) (oob.BWReport, error)
	Close(ctx context.Context, local *oob.PerftestDest) error
}

var (
	_ sideChannel = (*oob.PerftestConn)(nil)
	_ sideChannel = (*cmSide)(nil)
)

func newCMSide(p msgPipe, client bool, gidIndex int) *cmSide {
	return &cmSide{p: p, client: client, gidIndex: int32(gidIndex), remVer: 6.06}
}

// xchg sends out and receives exactly len(in) bytes, client first.
func (s *cmSide) xchg(ctx context.Context, out, in []byte) error {
	if s.client {
		if err := s.p.send(ctx, out); err != nil {
			return err
		}
	}
	n, err := s.p.recv(ctx, s.buf[:])
	if err != nil {
		return err
	}
	if n < len(in) {
		return fmt.Errorf("%w: got %d bytes, want %d", errCMMsg, n, len(in))
	}
	copy(in, s.buf[:len(in)])
	if !s.client {
		return s.p.send(ctx, out)
	}
	return nil
}

// Setup runs exchange_versions, check_sys_data and check_mtu.
func (s *cmSide) Setup(ctx context.Context, sys oob.SysData, mtu int) (oob.SysData, int, error) {
	var out, in [oob.PerftestVersionLen]byte
	copy(out[:], oob.PerftestVersion)
	if err := s.xchg(ctx, out[:], in[:]); err != nil {
		return sys, mtu, err
	}
	end := 0
	for end < len(in) && in[end] != 0 {
		end++
	}
	s.remVer, _ = strconv.ParseFloat(leadingNumber(string(in[:end])), 64)
	if s.remVer >= 5.32 {
		var o, i [4]byte
		binary.BigEndian.PutUint32(o[:], uint32(sys.CycleBuffer))
		if err := s.xchg(ctx, o[:], i[:]); err != nil {
			return sys, mtu, err
		}
		sys.CycleBuffer = max(sys.CycleBuffer, int32(binary.BigEndian.Uint32(i[:])))
		binary.BigEndian.PutUint32(o[:], uint32(sys.CacheLineSize))
		if err := s.xchg(ctx, o[:], i[:]); err != nil {
			return sys, mtu, err
		}
		sys.CacheLineSize = max(sys.CacheLineSize, int32(binary.BigEndian.Uint32(i[:])))
	}
	if s.remVer >= 5.1 {
		n := 2
		if s.remVer < 5.31 {
			n = 4
		}
		var o, i [4]byte
		copy(o[:n-1], strconv.Itoa(mtu))
		if err := s.xchg(ctx, o[:n], i[:n]); err != nil {
			return sys, mtu, err
		}
		end := 0
		for end < n && i[end] >= '0' && i[end] <= '9' {
			end++
		}
		if rem, err := strconv.Atoi(string(i[:end])); err == nil && rem >= 1 && rem <= 5 && rem < mtu {
			mtu = rem
		}
	}
	return sys, mtu, nil
}

// leadingNumber is the decimal number at the start of s, as atof reads it.
func leadingNumber(s string) string {
	end, dot := 0, false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		dot = dot || s[end] == '.'
		end++
	}
	if end == 0 {
		return "0"
	}
	return s[:end]
}

// HandShake is ctx_hand_shake: one address message each way.
func (s *cmSide) HandShake(ctx context.Context, local *oob.PerftestDest) (oob.PerftestDest, error) {
	gi := s.gidIndex
	if *local == (oob.PerftestDest{}) {
		gi = 0 // perftest's zeroed my_dest before set_up_connection
	}
	out := appendCMDest(s.out[:0], local, gi)
	var in [cmDestLen]byte
	if err := s.xchg(ctx, out, in[:]); err != nil {
		return oob.PerftestDest{}, err
	}
	d, _, err := parseCMDest(in[:])
	return d, err
}

// Connect runs the address handshakes: one per QP, connect (may be nil),
// one per QP again and one more, as oob.PerftestConn.Connect.
func (s *cmSide) Connect(ctx context.Context, local []oob.PerftestDest, connect func([]oob.PerftestDest) error) ([]oob.PerftestDest, error) {
	remote := make([]oob.PerftestDest, len(local))
	for round := 0; round < 2; round++ {
		for i := range local {
			r, err := s.HandShake(ctx, &local[i])
			if err != nil {
				return nil, err
			}
			remote[i] = r
		}
		if round == 0 && connect != nil {
			if err := connect(remote); err != nil {
				return nil, err
			}
		}
	}
	if len(local) > 0 {
		if _, err := s.HandShake(ctx, &local[0]); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

// ExchangeBWReport is xchg_bw_reports on the rdma_cm connection.
func (s *cmSide) ExchangeBWReport(ctx context.Context, local oob.BWReport) (oob.BWReport, error) {
	return oob.XchgBWReport(ctx, s.remVer, s.xchg, local)
}

// Close is ctx_close_connection with rdma_cm: one handshake, no "done".
func (s *cmSide) Close(ctx context.Context, local *oob.PerftestDest) error {
	_, err := s.HandShake(ctx, local)
	return err
}

// cmPipe sends and receives the side channel's messages on the QP of an
// rdma_cm connection: one signalled SEND at a time, one posted receive.
type cmPipe struct {
	conn *cm.Conn
	mr   *verbs.MR
	buf  []byte // send half, receive half
	wc   [1]verbs.WC
}

// prepare registers the buffers and posts the receive (cm.Options.Prepare).
func (p *cmPipe) prepare(c *cm.Conn) error {
	p.conn = c
	p.buf = make([]byte, 2*cmDestLen)
	var err error
	if p.mr, err = c.PD.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register the rdma_cm side channel's buffer: %w", err)
	}
	return p.postRecv()
}

// release deregisters the buffers (cm.Options.Release): the connection
// closes or an attempt failed.
func (p *cmPipe) release(*cm.Conn) {
	if p.mr != nil {
		p.mr.Deregister()
		p.mr = nil
	}
}

func (p *cmPipe) postRecv() error {
	wr := [1]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: p.mr.Addr() + cmDestLen, Length: cmDestLen, LKey: p.mr.LKey()}}}}
	if _, err := p.conn.QP.PostRecv(wr[:]); err != nil {
		return fmt.Errorf("Function ibv_post_recv failed for RDMA_CM QP: %w", err)
	}
	return nil
}

// wait polls cq for one completion, parking on the connection's
// completion channel, until ctx ends or the connection goes down.
func (p *cmPipe) wait(ctx context.Context, cq *verbs.CQ) (*verbs.WC, error) {
	w := toolkit.CQWaiter{Ctx: ctx, CQ: cq, Ch: p.conn.CompChannel, Spin: 8}
	for cq.Poll(p.wc[:]) == 0 {
		select {
		case <-p.conn.Disconnected():
			if cq.Poll(p.wc[:]) > 0 {
				return &p.wc[0], nil
			}
			return nil, errors.New("the rdma_cm side channel was disconnected by the peer")
		default:
		}
		if err := w.Idle(); err != nil {
			return nil, err
		}
	}
	return &p.wc[0], nil
}

func (p *cmPipe) send(ctx context.Context, msg []byte) error {
	if len(msg) > cmDestLen {
		return fmt.Errorf("%w: %d bytes to send", errCMMsg, len(msg))
	}
	copy(p.buf, msg)
	wr := [1]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(len(msg)), LKey: p.mr.LKey()}}}}
	if _, err := p.conn.QP.PostSend(wr[:]); err != nil {
		return fmt.Errorf("Function ibv_post_send failed: %w", err)
	}
	wc, err := p.wait(ctx, p.conn.SendCQ)
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
		return fmt.Errorf(" Bad wc status %d (%v)", wc.Status, wc.Status)
	}
	return nil
}

func (p *cmPipe) recv(ctx context.Context, in []byte) (int, error) {
	wc, err := p.wait(ctx, p.conn.RecvCQ)
	if err != nil {
		return 0, err
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode&verbs.WCRecv == 0 {
		return 0, fmt.Errorf("Bad wc status -- %d -- %d (%v)", wc.Status, wc.WRID, wc.Status)
	}
	n := copy(in, p.buf[cmDestLen:cmDestLen+min(int(wc.ByteLen), cmDestLen)])
	return n, p.postRecv()
}

// close disconnects (if active) or waits for the peer's disconnect (at
// most grace), then frees the connection.
func (p *cmPipe) close(active bool, grace time.Duration) {
	if p.conn == nil {
		return
	}
	cmClose(p.conn, active, grace)
	p.conn.Close() // and release

}

// cmClose disconnects c (active) or waits up to grace for the peer to.
func cmClose(c *cm.Conn, active bool, grace time.Duration) {
	if !active {
		select {
		case <-c.Disconnected():
			return
		case <-time.After(grace):
		}
	}
	c.Disconnect()
	select {
	case <-c.Disconnected():
	case <-time.After(grace):
	}
}

// cmChannel is one side's rdma_cm state for -R and -z.
type cmChannel struct {
	c     *config
	td    *toolkit.ToolDevice
	agent *cm.Agent
	addr  string // server ip:port
	comm  cmPipe
	side  *cmSide
	// The test connections: one event channel, one ID per QP.
	ch     *cm.EventChannel
	listen *cm.ID
	ids    []*cm.ID
}

// cmParam is the rdma_conn_param perftest gives rdma_connect for the test
// QPs: READ depths only for the read and atomic tests, retry and RNR
// retry --retry_count (7), no private data.
func (c *config) cmParam() *cm.ConnParam {
	p := &cm.ConnParam{RetryCount: c.cmRetry(), RNRRetryCount: c.cmRetry()}
	if c.tool.verb == verbRead || c.tool.verb == verbAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(c.outReads), uint8(c.outReads)
	}
	return p
}

// cmCommParam is the side channel's: its comm struct's verb is SEND;
// retry --retry_count (7), RNR retry 7.
func cmCommParam(retry uint8) *cm.ConnParam {
	return &cm.ConnParam{RetryCount: retry, RNRRetryCount: 7}
}

// resolveIPv4 resolves a server name as perftest does (AF_INET).
func resolveIPv4(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("Problem in resolving basic address and port: %q: %v", host, err)
	}
	return ips[0].Unmap(), nil
}

// startCM attaches the CM to the device and sets up the side channel:
// the server accepts one connection on port -p, the client connects to it
// (retrying while the server is not listening yet, for c.connectTO).
func startCM(ctx context.Context, c *config, td *toolkit.ToolDevice, stderr io.Writer) (*cmChannel, error) {
	ag, err := cm.Attach(td.Dev, toolkit.AgentConfig())
	if err != nil {
		return nil, fmt.Errorf("Unable to create RDMA_CM resources: %w", err)
	}
	p := &cmChannel{c: c, td: td, agent: ag}
	o := &cm.Options{Src: td.Info.Addr.Addr(), Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1},
		CQE: 1, CompChannel: true, Param: cmCommParam(c.cmRetry()), Prepare: p.comm.prepare,
		Release: p.comm.release} // no TOS: kernel ib_write_bw -R -T's side channel sends with TOS 0
	var conn *cm.Conn
	if c.isServer() {
		conn, err = cmAcceptOne(ctx, netip.AddrPortFrom(td.Info.Addr.Addr(), uint16(c.tcpPort)), o)
	} else {
		var ip netip.Addr
		if ip, err = resolveIPv4(ctx, c.server); err == nil {
			p.addr = netip.AddrPortFrom(ip, uint16(c.tcpPort)).String()
			conn, err = cmDial(ctx, p.addr, o, c.connectTO, ag.Config(), stderr)
		}
	}
	if err != nil {
		ag.Close()
		return nil, err
	}
	p.comm.conn = conn
	p.side = newCMSide(&p.comm, !c.isServer(), c.gidx)
	return p, nil
}

// cmAcceptOne listens on ap, accepts one connection and stops listening
// (rdma_server_connect destroys its listening ID).
func cmAcceptOne(ctx context.Context, ap netip.AddrPort, o *cm.Options) (*cm.Conn, error) {
	l, err := cm.Listen(ap.String(), o)
	if err != nil {
		return nil, fmt.Errorf(" rdma_bind_addr/rdma_listen on %v failed: %w", ap, err)
	}
	defer l.Close()
	conn, err := l.Accept(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while waiting for an rdma_cm client on %v", ap)
		}
		return nil, fmt.Errorf("rdma_cm accept on %v: %w", ap, err)
	}
	return conn, nil
}

// cmDial connects to addr as perftest's rdma_client_connect: an address
// that does not resolve (ADDR_ERROR, 2 s each) is tried 10 times; any
// other failed event ends it with perftest's lines. Unlike perftest, a
// REJECTED (nothing listens yet) is retried every 100 ms for grace, and
// a line on stderr says what is being waited for when the server's CM
// does not answer within cfg.Timeout.
func cmDial(ctx context.Context, addr string, o *cm.Options, grace time.Duration, cfg cm.Config, stderr io.Writer) (*cm.Conn, error) {
	const resolveTries = 10 // perftest's NUM_OF_RETRIES
	deadline := time.Now().Add(grace)
	addrErrs, saidRejected := 0, false
	for {
		said := time.AfterFunc(cfg.Timeout, func() {
			fmt.Fprintf(stderr, " No answer yet from %s: waiting for its connection manager to answer the connection request"+
				" (resent every %.1f s; UNREACHABLE after %.0f s)\n", addr, cfg.Timeout.Seconds(), cfg.GiveUpAfter().Seconds())
		})
		conn, err := cm.Dial(ctx, addr, o)
		said.Stop()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while connecting to %s: %w", addr, ctx.Err())
		}
		var rj *cm.RejectedError
		var ee *cm.EventError
		switch {
		case errors.As(err, &ee) && ee.Event == cm.EventAddrError:
			if addrErrs++; addrErrs < resolveTries {
				continue
			}
			fmt.Fprintf(stderr, "Received %d times ADDR_ERROR\n", resolveTries)
		case errors.As(err, &rj) && time.Now().Before(deadline):
			if !saidRejected {
				saidRejected = true
				fmt.Fprintf(stderr, " Waiting for a server to listen on %s (rejected: nothing listens there yet); retrying for %v\n",
					addr, grace)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case errors.As(err, &rj):
			fmt.Fprintf(stderr, "Unexpected CM event bl blka %d\n", int(cm.EventRejected))
		case errors.As(err, &ee):
			fmt.Fprintf(stderr, "Unexpected CM event bl blka %d\n", int(ee.Event))
		}
		fmt.Fprintln(stderr, " Unable to perform rdma_client function")
		return nil, fmt.Errorf("Unable to init the socket connection (%s: %w)", addr, err)
	}
}

// connectTraffic is create_rdma_cm_connection: an all-zero handshake, one
// rdma_cm connection per QP on one event channel (the CM creates each QP
// on r's PD and CQs and brings it to RTS with the negotiated values), and
// another all-zero handshake. It fills r's QPs and local addresses.
func (p *cmChannel) connectTraffic(ctx context.Context, r *resources, gid verbs.GID) error {
	c := p.c
	sync := func(when string) error {
		var zero oob.PerftestDest
		if _, err := p.side.HandShake(ctx, &zero); err != nil {
			return fmt.Errorf("Failed to sync between client and server %s creating RDMA CM connection: %w", when, err)
		}
		return nil
	}
	p.ch = cm.NewEventChannel()
	var err error
	if c.isServer() {
		// Listening before the sync (perftest listens right after it) saves
		// the client a rejected first attempt; the wire is the same.
		err = p.listenTraffic()
		if err == nil {
			err = sync("before")
		}
		if err == nil {
			err = p.acceptTraffic(ctx, r)
		}
	} else {
		err = sync("before")
		if err == nil {
			err = p.dialTraffic(ctx, r)
		}
	}
	if err != nil {
		return fmt.Errorf("Failed to create RDMA CM connection: %w", err)
	}
	if err := sync("after"); err != nil {
		return err
	}
	for i, id := range p.ids {
		qp := id.QP()
		r.qpIndex[qp.QPN()] = i
		r.qps = append(r.qps, qp)
		r.local = append(r.local, oob.PerftestDest{OutReads: uint16(c.outReads), QPN: qp.QPN(), PSN: toolkit.RandPSN(),
			RKey: r.mr(i).RKey(), VAddr: r.addr(r.recvOff(i)), GID: gid})
	}
	return nil
}

func (p *cmChannel) listenTraffic() error {
	ap := netip.AddrPortFrom(p.td.Info.Addr.Addr(), uint16(p.c.tcpPort))
	id, err := p.ch.CreateID(nil, mad.PortSpaceTCP)
	if err == nil {
		if err = id.BindAddr(ap); err == nil {
			err = id.Listen(p.c.numQP)
		}
		if err != nil {
			id.Destroy()
		}
	}
	if err != nil {
		return fmt.Errorf("Failed to listen on RDMA CM server listen ID (%v): %w", ap, err)
	}
	p.listen = id
	return nil
}

// acceptTraffic is rdma_cm_connection_request_handler for each QP: the
// READ depths are clamped to the peer's, the RNR timer set to perftest's.
func (p *cmChannel) acceptTraffic(ctx context.Context, r *resources) error {
	c := p.c
	defer func() {
		p.listen.Destroy() // rdma_destroy_id(listen_id)
		p.listen = nil
	}()
	established := 0
	for established < c.numQP {
		ev, err := p.ch.Get(ctx)
		if err != nil {
			return err
		}
		switch ev.Type {
		case cm.EventConnectRequest:
			id := ev.ID
			if len(p.ids) == c.numQP {
				id.Reject(nil)
				id.Destroy()
				continue
			}
			a := &cm.ConnParam{RetryCount: c.cmRetry(), RNRRetryCount: c.cmRetry()}
			if c.tool.verb == verbRead || c.tool.verb == verbAtomic {
				a.ResponderResources = uint8(min(c.outReads, int(ev.Param.InitiatorDepth)))
				a.InitiatorDepth = uint8(min(c.outReads, int(ev.Param.ResponderResources)))
			}
			id.SetMinRNRTimer(minRNRTimer)
			if _, err := id.CreateQP(r.pd, r.qpAttr); err != nil {
				id.Reject(nil)
				id.Destroy()
				return fmt.Errorf("Failed to create QP: %w", err)
			}
			if err := id.Accept(a); err != nil {
				id.DestroyQP()
				id.Destroy()
				return fmt.Errorf("Failed to accept RDMA CM connection: %w", err)
			}
			p.ids = append(p.ids, id)
		case cm.EventEstablished:
			established++
		case cm.EventDisconnected, cm.EventTimewaitExit:
		default:
			return fmt.Errorf("RDMA CM event error: %v (status %d)", ev.Type, ev.Status)
		}
	}
	return nil
}

// dialTraffic connects each QP (rdma_cm_client_connection), retrying every
// 100 ms while the server rejects, for c.connectTO.
func (p *cmChannel) dialTraffic(ctx context.Context, r *resources) error {
	c := p.c
	dst, err := cm.ParseAddr(p.addr)
	if err != nil {
		return err
	}
	param := c.cmParam()
	src := netip.AddrPortFrom(p.td.Info.Addr.Addr(), 0)
	deadline := time.Now().Add(c.connectTO)
	for i := 0; i < c.numQP; i++ {
		for {
			id, err := p.ch.CreateID(nil, mad.PortSpaceTCP)
			if err != nil {
				return err
			}
			err = p.dialOne(ctx, id, src, dst, param, r)
			if err == nil {
				p.ids = append(p.ids, id)
				break
			}
			id.DestroyQP()
			id.Destroy()
			var rj *cm.RejectedError
			if ctx.Err() != nil || time.Now().After(deadline) || !errors.As(err, &rj) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// dialOne resolves, creates the QP and connects one ID, waiting for
// ESTABLISHED.
func (p *cmChannel) dialOne(ctx context.Context, id *cm.ID, src, dst netip.AddrPort, param *cm.ConnParam, r *resources) error {
	if err := id.ResolveAddr(src, dst, 2*time.Second); err != nil {
		return err
	}
	for {
		ev, err := p.ch.Get(ctx)
		if err != nil {
			return err
		}
		if ev.ID != id {
			continue // a leftover event of an earlier attempt
		}
		switch ev.Type {
		case cm.EventAddrResolved:
			if p.c.tosSet {
				id.SetTOS(uint8(p.c.tos)) // perftest's rdma_set_option(RDMA_OPTION_ID_TOS) after the address
			}
			if err := id.ResolveRoute(2 * time.Second); err != nil {
				return err
			}
		case cm.EventRouteResolved:
			if _, err := id.CreateQP(r.pd, r.qpAttr); err != nil {
				return fmt.Errorf("Failed to create QP: %w", err)
			}
			if err := id.Connect(param); err != nil {
				return err
			}
		case cm.EventEstablished:
			return nil
		case cm.EventRejected:
			return &cm.RejectedError{Reason: ev.Reason, PrivateData: ev.Param.PrivateData}
		default:
			return fmt.Errorf("RDMA CM event error: %v (status %d)", ev.Type, ev.Status)
		}
	}
}

// close tears the connections down: the client disconnects the test
// connections then the side channel, as perftest; the server waits for it
// (at most a few seconds) before disconnecting itself.
func (p *cmChannel) close() {
	active := !p.c.isServer()
	if p.listen != nil {
		p.listen.Destroy()
	}
	if len(p.ids) > 0 {
		left := map[*cm.ID]bool{}
		for _, id := range p.ids {
			left[id] = true
			if active {
				id.Disconnect()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		for len(left) > 0 {
			ev, err := p.ch.Get(ctx)
			if err != nil {
				break
			}
			if ev.Type == cm.EventDisconnected {
				delete(left, ev.ID)
			}
		}
		cancel()
		for _, id := range p.ids {
			if left[id] {
				id.Disconnect()
			}
			id.DestroyQP()
			id.Destroy()
		}
	}
	if p.ch != nil {
		p.ch.Close()
	}
	p.comm.close(active, 3*time.Second)
	p.agent.Close()
}

// printCMWaiting is what the server prints before the traffic connections.
func printCMWaiting(w io.Writer) {
	io.WriteString(w, " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n"+resultLine)
}
