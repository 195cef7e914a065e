package rsocket

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/verbs"
)

// PacketConn is a datagram rsocket (SOCK_DGRAM): a net.PacketConn whose
// datagrams, up to MaxDatagram bytes, travel as UD SENDs between rsockets
// (rsocket.c's ds_* protocol, dsproto.go), after a first exchange over the
// UDP socket bound to the same address. As UDP, delivery is not
// guaranteed: a datagram to an address with no rsocket is dropped without
// an error, and datagrams that find the receive queue full are dropped.
type PacketConn struct {
	cfg Config
	log *slog.Logger
	udp *net.UDPConn
	// Stats counts traffic.
	Stats PacketStats

	mu       sync.Mutex
	qps      []*dsQP
	dests    map[netip.AddrPort]*dsDest
	conn     *dsDest // the connected destination (Connect)
	sbuf     []byte  // send slots of sndLowat bytes
	sfree    []int   // free send slots (offsets)
	rq       []dsMsg // received, a ring of rqSize+1
	rqHead   int
	rqTail   int
	rqSize   int
	sqSize   int
	armed    bool
	nonblk   bool
	rdl, wdl time.Time
	closed   bool
	wake     chan struct{} // capacity 1: an event may have come
	notify   atomic.Pointer[func()]
	done     chan struct{}
}

// PacketStats count a datagram rsocket's traffic.
type PacketStats struct {
	// Sent and Received count datagrams sent and received over UD;
	// SentUDP and ReceivedUDP those that went over the UDP socket (the
	// first ones to a peer whose QP was not known yet).
	Sent, Received, SentUDP, ReceivedUDP atomic.Uint64
	// Dropped counts datagrams received with the receive queue full, or
	// with a bad header.
	Dropped atomic.Uint64
	// Parks counts calls that slept waiting for an event (wait): blocking
	// ones, and non-blocking ones on a device whose link cannot be polled.
	Parks atomic.Uint64
}

// dsQP is a UD QP of the socket, one per local address (struct ds_qp).
type dsQP struct {
	src  netip.AddrPort // its address: the device's, the socket's port
	dev  *verbs.Device
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ // send and receive completions, as rsocket.c
	qp   *verbs.QP
	rbuf []byte // rqSize slots of sndLowat, then the GRH scratch
	rmr  *verbs.MR
	smr  *verbs.MR
	hdr  [DSHeaderLen6]byte
	hlen int
	rwr  [1]verbs.RecvWR
	rsge [2]verbs.SGE
}

// dsDest is a destination (struct ds_dest): the QP that sends to it and,
// once its QP is known, the address handle and QPN.
type dsDest struct {
	addr netip.AddrPort
	qp   *dsQP
	ah   *verbs.AH
	qpn  uint32
}

// dsMsg is a received datagram: in a QP's receive slot, or (forwarded
// from the UDP socket) in data.
type dsMsg struct {
	qp   *dsQP
	off  int
	n    int
	data []byte
	src  netip.AddrPort
}

const dsRecvFlag = uint64(1) << 63

var errWouldBlock = &Error{Op: "rsocket", Reason: "would block", Errno: syscall.EAGAIN}

// ListenPacket opens a datagram rsocket bound to addr ("ip:port"; port 0
// picks one). An unspecified IP binds the UDP socket to every address;
// the datagrams then travel on the device of cfg.Src, else on the first
// device whose rdma_cm agent is attached (cm.Attach).
func ListenPacket(addr string, cfg *Config) (*PacketConn, error) {
	ap, err := cm.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return listenPacket(ap, cfg)
}

func listenPacket(ap netip.AddrPort, cfg *Config) (*PacketConn, error) {
	c := cfg.norm()
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, err
	}
	pc := &PacketConn{cfg: c, log: c.Logger, udp: udp, dests: map[netip.AddrPort]*dsDest{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	// ds_set_qp_size: the queues fit the buffers, a datagram a slot.
	pc.rqSize = max(min(c.RQSize, c.RecvBuf/sndLowat), 1)
	pc.sqSize = max(min(c.SQSize, c.SendBuf/sndLowat), 1)
	pc.sbuf = make([]byte, pc.sqSize*sndLowat)
	pc.sfree = make([]int, pc.sqSize)
	for i := range pc.sfree {
		pc.sfree[i] = i * sndLowat
	}
	pc.rq = make([]dsMsg, pc.rqSize+1)
	go pc.serveUDP()
	return pc, nil
}

// LocalAddr returns the socket's address (its UDP socket's).
func (pc *PacketConn) LocalAddr() net.Addr { return Addr{pc.localAP()} }

func (pc *PacketConn) localAP() netip.AddrPort {
	ap := pc.udp.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// RemoteAddr returns the connected address (Connect), or nil.
func (pc *PacketConn) RemoteAddr() net.Addr {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.conn == nil {
		return nil
	}
	return Addr{pc.conn.addr}
}

// agentFor returns the rdma_cm agent whose device sends from local
// address a: the one on a, else cfg.Src's, else the first.
func (pc *PacketConn) agentFor(a netip.Addr) (*cm.Agent, error) {
	as := cm.Agents()
	for _, want := range []netip.Addr{a, pc.cfg.Src} {
		for _, ag := range as {
			if want.IsValid() && ag.Addr() == want {
				return ag, nil
			}
		}
	}
	if len(as) == 0 {
		return nil, &Error{Op: "sendto", Reason: "no RDMA device (no rdma_cm agent attached)", Errno: syscall.ENODEV}
	}
	return as[0], nil
}

// getQP returns the QP that sends from the socket's address, creating it
// (ds_get_qp, ds_create_qp). Under pc.mu.
func (pc *PacketConn) getQP() (*dsQP, error) {
	local := pc.localAP()
	ag, err := pc.agentFor(local.Addr())
	if err != nil {
		return nil, err
	}
	src := netip.AddrPortFrom(ag.Addr(), local.Port())
	for _, q := range pc.qps {
		if q.src == src {
			return q, nil
		}
	}
	q, err := pc.createQP(ag, src)
	if err != nil {
		return nil, err
	}
	pc.qps = append(pc.qps, q)
	return q, nil
}

func (pc *PacketConn) createQP(ag *cm.Agent, src netip.AddrPort) (q *dsQP, err error) {
	q = &dsQP{src: src, dev: ag.Device(), pd: ag.PD()}
	defer func() {
		if err != nil {
			q.free()
		}
	}()
	h := DSHeader{Addr: src}
	q.hlen = h.Marshal(q.hdr[:])
	q.ch = q.dev.CreateCompChannel()
	q.ch.SetNotify(pc.event)
	if q.cq, err = q.dev.CreateCQ(pc.sqSize+pc.rqSize, nil, q.ch); err != nil {
		return nil, err
	}
	if q.qp, err = q.pd.CreateQP(&verbs.QPInitAttr{SendCQ: q.cq, RecvCQ: q.cq, QPType: verbs.QPTypeUD, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(pc.sqSize), MaxRecvWR: uint32(pc.rqSize), MaxSendSGE: 1, MaxRecvSGE: 2,
			MaxInlineData: uint32(max(pc.cfg.Inline, 0))}}); err != nil {
		return nil, err
	}
	if err = q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: UDPQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return nil, err
	}
	if err = q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return nil, err
	}
	if err = q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return nil, err
	}
	q.rbuf = make([]byte, pc.rqSize*sndLowat+grhLen)
	if q.rmr, err = q.pd.RegMR(q.rbuf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.smr, err = q.pd.RegMR(pc.sbuf, 0); err != nil {
		return nil, err
	}
	for i := range pc.rqSize {
		if err = q.postRecv(i * sndLowat); err != nil {
			return nil, err
		}
	}
	// Armed from the start (rs_create_cq), so that a first datagram
	// raises an event for rpoll.
	q.cq.ReqNotify(false)
	return q, nil
}

// postRecv posts the receive of slot off: the GRH into the scratch area
// behind the slots, the datagram into the slot (ds_post_recv).
func (q *dsQP) postRecv(off int) error {
	base := q.rmr.Addr()
	q.rsge[0] = verbs.SGE{Addr: base + uint64(len(q.rbuf)-grhLen), Length: grhLen, LKey: q.rmr.LKey()}
	q.rsge[1] = verbs.SGE{Addr: base + uint64(off), Length: sndLowat, LKey: q.rmr.LKey()}
	q.rwr[0] = verbs.RecvWR{WRID: dsRecvFlag | uint64(off), SGList: q.rsge[:]}
	_, err := q.qp.PostRecv(q.rwr[:])
	return err
}

func (q *dsQP) free() {
	if q.qp != nil {
		q.qp.Destroy()
	}
	if q.cq != nil {
		q.cq.Destroy()
	}
	if q.rmr != nil {
		q.rmr.Deregister()
	}
	if q.smr != nil {
		q.smr.Deregister()
	}
	if q.ch != nil {
		q.ch.SetNotify(nil)
	}
}

// getDest returns the destination for addr, creating it (ds_get_dest).
// Under pc.mu.
func (pc *PacketConn) getDest(addr netip.AddrPort) (*dsDest, error) {
	if d := pc.dests[addr]; d != nil {
		return d, nil
	}
	q, err := pc.getQP()
	if err != nil {
		return nil, err
	}
	if len(pc.dests) >= maxDests {
		for k, d := range pc.dests { // bound the map: forget one
			if d != pc.conn {
				d.destroyAH()
				delete(pc.dests, k)
				break
			}
		}
	}
	d := &dsDest{addr: addr, qp: q}
	pc.dests[addr] = d
	return d, nil
}

// maxDests bounds the destinations a socket remembers.
const maxDests = 4096

func (d *dsDest) destroyAH() {
	if d.ah != nil {
		d.ah.Destroy()
		d.ah = nil
	}
}

// setQPN makes the address handle of d, whose QP is qpn
// (udp_svc_create_ah). Under pc.mu.
func (pc *PacketConn) setQPN(d *dsDest, qpn uint32) {
	if d.ah != nil && d.qpn == qpn {
		return
	}
	d.destroyAH()
	ah, err := d.qp.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(d.addr.Addr()), SGIDIndex: sgidIndex(d.qp), HopLimit: 64}})
	if err != nil {
		if pc.log != nil {
			pc.log.Debug("rsocket: datagram address handle", "dest", d.addr, "err", err)
		}
		return
	}
	d.ah, d.qpn = ah, qpn
}

func sgidIndex(q *dsQP) uint8 {
	g := verbs.GIDFromAddr(q.src.Addr())
	for i, x := range q.dev.GIDs() {
		if x == g {
			return uint8(i)
		}
	}
	return 0
}

// serveUDP is the UDP service (udp_svc_process_rs): it answers a peer's
// first datagrams with its QP, learns the peer's, and hands the datagrams
// that came over UDP to the receive queue.
func (pc *PacketConn) serveUDP() {
	defer close(pc.done)
	// A datagram of MaxDatagram bytes arrives behind a DS UDP header (16 or
	// 28 bytes): a buffer of sndLowat cut its last bytes off (2,032 of
	// 2,040 bytes read). Any UDP datagram fits; longer data is dropped.
	buf := make([]byte, 1<<16)
	for {
		n, from, err := pc.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // an ICMP error of an earlier send (ECONNREFUSED) and the like
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		pc.handleUDP(buf[:n], from)
	}
}

func (pc *PacketConn) handleUDP(b []byte, from netip.AddrPort) {
	h, hl, err := ParseDSUDPHeader(b, from.Addr().Is6())
	if err != nil {
		pc.Stats.Dropped.Add(1)
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return
	}
	d, err := pc.getDest(from)
	if err != nil {
		return
	}
	if h.Op == OpData {
		pc.sendUDP(d, nil, OpCtrl) // tell the sender our QP
	}
	pc.setQPN(d, h.QPN)
	if h.Op != OpData {
		return
	}
	pc.Stats.ReceivedUDP.Add(1)
	if pc.rqFull() || len(b)-hl > MaxDatagram {
		pc.Stats.Dropped.Add(1)
		return
	}
	pc.rq[pc.rqTail] = dsMsg{data: append([]byte(nil), b[hl:]...), src: from}
	pc.rqTail = pc.rqNext(pc.rqTail)
	pc.event()
}

// sendUDP sends p to d over the UDP socket, behind a DSUDPHeader naming
// d's QP (ds_sendv_udp). Under pc.mu.
func (pc *PacketConn) sendUDP(d *dsDest, p []byte, op uint8) (int, error) {
	var hb [DSUDPHeaderLen6 + sndLowat]byte
	h := DSUDPHeader{Op: op, QPN: d.qp.qp.QPN(), Addr: d.qp.src.Addr()}
	n := h.Marshal(hb[:])
	n += copy(hb[n:], p)
	_, err := pc.udp.WriteToUDPAddrPort(hb[:n], d.addr)
	if err != nil {
		return 0, err
	}
	if op == OpData {
		pc.Stats.SentUDP.Add(1)
	}
	return len(p), nil
}

// event wakes a waiting call and calls the notify function: a CQ event
// (on the device's goroutine) or a datagram forwarded from UDP.
func (pc *PacketConn) event() {
	select {
	case pc.wake <- struct{}{}:
	default:
	}
	if f := pc.notify.Load(); f != nil {
		(*f)()
	}
}

// SetNotify sets a function called after every event that may change what
// Poll reports (the C library writes an eventfd there). It must not block.
func (pc *PacketConn) SetNotify(f func()) {
	if f == nil {
		pc.notify.Store(nil)
		return
	}
	pc.notify.Store(&f)
}

func (pc *PacketConn) rqNext(i int) int {
	if i++; i == len(pc.rq) {
		return 0
	}
	return i
}

func (pc *PacketConn) rqFull() bool   { return pc.rqNext(pc.rqTail) == pc.rqHead }
func (pc *PacketConn) haveData() bool { return pc.rqHead != pc.rqTail }

// progress polls the CQs (ds_poll_cqs), under pc.mu.
func (pc *PacketConn) progress() {
	var wcs [16]verbs.WC
	for _, q := range pc.qps {
		for drained := false; !drained; {
			select {
			case cq := <-q.ch.C():
				cq.AckEvents(1)
				pc.armed = false
			default:
				drained = true
			}
		}
		for {
			n := q.cq.Poll(wcs[:])
			for i := range wcs[:n] {
				pc.onCompletion(q, &wcs[i])
			}
			if n < len(wcs) {
				break
			}
		}
	}
}

func (pc *PacketConn) onCompletion(q *dsQP, wc *verbs.WC) {
	off := int(uint32(wc.WRID))
	if wc.WRID&dsRecvFlag == 0 {
		pc.sfree = append(pc.sfree, off)
		return
	}
	if pc.closed || wc.Status != verbs.WCSuccess {
		return // flushed
	}
	n := int(wc.ByteLen) - grhLen
	if n < DSHeaderLen4 || n > sndLowat || pc.rqFull() {
		pc.Stats.Dropped.Add(1)
		q.postRecv(off)
		return
	}
	h, hl, err := ParseDSHeader(q.rbuf[off : off+n])
	if err != nil || hl > n {
		pc.Stats.Dropped.Add(1)
		q.postRecv(off)
		return
	}
	if d := pc.dests[h.Addr]; d != nil && d.ah == nil && wc.SrcQP != 0 {
		// A peer we send to whose QP we have not learnt yet (its UDP
		// answer still on its way: on a busy host it came after 8
		// round trips) names it in the datagram itself: later
		// datagrams to it go over UD. Learnt once, never replaced.
		pc.setQPN(d, wc.SrcQP)
	}
	pc.rq[pc.rqTail] = dsMsg{qp: q, off: off + hl, n: n - hl, src: h.Addr}
	pc.rqTail = pc.rqNext(pc.rqTail)
	pc.Stats.Received.Add(1)
}

// pollLink receives on the calling goroutine what the devices' links
// hold (verbs.Device.PollLink), under pc.mu, and reports whether anything
// came: a program that spins on EAGAIN or on rpoll with no timeout (udpong
// does) then moves the datagrams itself, instead of taking the processor
// from the devices' receive goroutines (a spinning udpong's echo took
// 1.8 ms a round trip without it).
func (pc *PacketConn) pollLink() bool {
	got := false
	for i, q := range pc.qps {
		if i > 0 && q.dev == pc.qps[0].dev {
			continue
		}
		if q.dev.PollLink() > 0 {
			got = true
		}
	}
	return got
}

// linksPolled reports whether pollLink reaches every device of pc's QPs:
// a non-blocking call that polled them and found nothing then fails at
// once, as Conn.wait's poll mode.
func (pc *PacketConn) linksPolled() bool {
	for _, q := range pc.qps {
		if !q.dev.CanPollLink() {
			return false
		}
	}
	return len(pc.qps) > 0
}

// wait blocks (releasing pc.mu) until an event may have come or the
// deadline passes; a non-blocking call fails with EAGAIN at once when its
// devices' links were polled (linksPolled), else after waiting at most
// nbPark, once (as Conn.wait).
func (pc *PacketConn) wait(deadline time.Time, nb bool, ws *waitState) error {
	if nb && (ws.parked || pc.linksPolled()) {
		return errWouldBlock
	}
	if pc.closed {
		return net.ErrClosed
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return os.ErrDeadlineExceeded
	}
	if !pc.armed {
		for _, q := range pc.qps {
			q.cq.ReqNotify(false)
		}
		pc.armed = true
		return nil // poll once more
	}
	pc.mu.Unlock()
	defer pc.mu.Lock()
	if nb {
		ws.parked = true
		if deadline.IsZero() || time.Until(deadline) > nbPark {
			deadline = time.Now().Add(nbPark)
		}
	}
	pc.Stats.Parks.Add(1)
	var tc <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-pc.wake:
	case <-tc:
	case <-pc.done:
	}
	return nil
}

// ReadFrom reads a datagram (rrecvfrom): a longer one is truncated to
// len(p), the rest discarded.
func (pc *PacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, src, err := pc.RecvFrom(p, 0)
	if err != nil {
		return 0, nil, err
	}
	return n, Addr{src}, nil
}

// Read reads a datagram (rrecv).
func (pc *PacketConn) Read(p []byte) (int, error) {
	n, _, err := pc.RecvFrom(p, 0)
	return n, err
}

// RecvFrom reads a datagram with flags MsgPeek, MsgDontWait (ds_recvfrom).
func (pc *PacketConn) RecvFrom(p []byte, flags int) (int, netip.AddrPort, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var ws waitState
	for {
		if pc.closed {
			return 0, netip.AddrPort{}, net.ErrClosed
		}
		pc.progress()
		if pc.haveData() {
			break
		}
		if pc.pollLink() {
			continue
		}
		if err := pc.wait(pc.rdl, pc.nonblk || flags&MsgDontWait != 0, &ws); err != nil {
			return 0, netip.AddrPort{}, err
		}
	}
	m := &pc.rq[pc.rqHead]
	var n int
	if m.qp != nil {
		n = copy(p, m.qp.rbuf[m.off:m.off+m.n])
	} else {
		n = copy(p, m.data)
	}
	src := m.src
	if flags&MsgPeek == 0 {
		if m.qp != nil {
			m.qp.postRecv(m.off &^ (sndLowat - 1))
		}
		*m = dsMsg{}
		pc.rqHead = pc.rqNext(pc.rqHead)
	}
	return n, src, nil
}

// Connect sets the destination of Write (rconnect): the UDP socket is
// connected to addr.
func (pc *PacketConn) Connect(addr netip.AddrPort) error {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return net.ErrClosed
	}
	d, err := pc.getDest(addr)
	if err != nil {
		return err
	}
	pc.conn = d
	return nil
}

// Write sends a datagram to the connected address (rsend).
func (pc *PacketConn) Write(p []byte) (int, error) { return pc.SendTo(p, netip.AddrPort{}, 0) }

// WriteTo sends a datagram to addr (an Addr, *net.UDPAddr or
// netip.AddrPort-valued net.Addr) (rsendto).
func (pc *PacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case Addr:
		ap = a.AddrPort
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(addr.String()); err != nil {
			return 0, &Error{Op: "sendto", Reason: "not an IP address and port: " + addr.String(), Errno: syscall.EINVAL}
		}
	}
	return pc.SendTo(p, ap, 0)
}

var errNoDest = &Error{Op: "send", Reason: "no destination: the socket is not connected", Errno: syscall.EDESTADDRREQ}

// SendTo sends p to addr (the connected address if addr is the zero
// value) with flags MsgDontWait (dsend): over UDP until the peer's QP is
// known, then as a UD SEND.
func (pc *PacketConn) SendTo(p []byte, addr netip.AddrPort, flags int) (int, error) {
	if len(p) > MaxDatagram {
		return 0, &Error{Op: "send", Reason: "a datagram rsocket carries at most " + itoa(MaxDatagram) + " bytes", Errno: syscall.EMSGSIZE}
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return 0, net.ErrClosed
	}
	d := pc.conn
	if addr.IsValid() {
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
		if d == nil || d.addr != addr {
			var err error
			if d, err = pc.getDest(addr); err != nil {
				return 0, err
			}
		}
	}
	if d == nil {
		return 0, errNoDest
	}
	if d.ah == nil {
		return pc.sendUDP(d, p, OpData)
	}
	var ws waitState
	for {
		pc.progress()
		if len(pc.sfree) > 0 {
			break
		}
		if pc.pollLink() {
			continue
		}
		if err := pc.wait(pc.wdl, pc.nonblk || flags&MsgDontWait != 0, &ws); err != nil {
			return 0, err
		}
		if pc.closed {
			return 0, net.ErrClosed
		}
	}
	if d.ah == nil { // forgotten while waiting
		return pc.sendUDP(d, p, OpData)
	}
	off := pc.sfree[len(pc.sfree)-1]
	pc.sfree = pc.sfree[:len(pc.sfree)-1]
	q := d.qp
	n := copy(pc.sbuf[off:], q.hdr[:q.hlen])
	n += copy(pc.sbuf[off+n:], p)
	wr := [1]verbs.SendWR{{WRID: uint64(off), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		AH: d.ah, RemoteQPN: d.qpn, RemoteQKey: UDPQKey}}
	if n <= pc.cfg.Inline {
		wr[0].Flags |= verbs.SendInline
		wr[0].Inline = pc.sbuf[off : off+n]
	} else {
		wr[0].SGList = []verbs.SGE{{Addr: q.smr.Addr() + uint64(off), Length: uint32(n), LKey: q.smr.LKey()}}
	}
	if _, err := q.qp.PostSend(wr[:]); err != nil {
		pc.sfree = append(pc.sfree, off)
		return 0, err
	}
	pc.Stats.Sent.Add(1)
	return len(p), nil
}

// Poll reports which of events (PollIn, PollOut) are ready; with arm, a
// call that finds nothing ready arms the CQs so that the next datagram
// calls the SetNotify function.
func (pc *PacketConn) Poll(events int, arm bool) int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return PollErr
	}
	pc.progress()
	rev := pc.revents(events)
	if rev == 0 && pc.pollLink() {
		pc.progress()
		rev = pc.revents(events)
	}
	if rev == 0 && arm && !pc.armed {
		for _, q := range pc.qps {
			q.cq.ReqNotify(false)
		}
		pc.armed = true
		pc.progress()
		rev = pc.revents(events)
	}
	return rev
}

func (pc *PacketConn) revents(events int) int {
	rev := 0
	if events&PollIn != 0 && pc.haveData() {
		rev |= PollIn
	}
	if events&PollOut != 0 && len(pc.sfree) > 0 {
		rev |= PollOut
	}
	return rev
}

// SetNonblock makes reads and writes fail with EAGAIN instead of waiting.
func (pc *PacketConn) SetNonblock(on bool) {
	pc.mu.Lock()
	pc.nonblk = on
	pc.mu.Unlock()
}

// SetDeadline sets the read and write deadlines.
func (pc *PacketConn) SetDeadline(t time.Time) error {
	pc.mu.Lock()
	pc.rdl, pc.wdl = t, t
	pc.mu.Unlock()
	pc.event()
	return nil
}

// SetReadDeadline sets the read deadline.
func (pc *PacketConn) SetReadDeadline(t time.Time) error {
	pc.mu.Lock()
	pc.rdl = t
	pc.mu.Unlock()
	pc.event()
	return nil
}

// SetWriteDeadline sets the write deadline.
func (pc *PacketConn) SetWriteDeadline(t time.Time) error {
	pc.mu.Lock()
	pc.wdl = t
	pc.mu.Unlock()
	pc.event()
	return nil
}

// Close waits a bounded time for the sends in flight (ds_shutdown), then
// frees the QPs and closes the UDP socket.
func (pc *PacketConn) Close() error {
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return net.ErrClosed
	}
	dl := time.Now().Add(closeWait)
	var ws waitState
	for len(pc.sfree) < pc.sqSize && len(pc.qps) > 0 && time.Now().Before(dl) {
		pc.progress()
		if len(pc.sfree) < pc.sqSize {
			ws.parked = false
			pc.wait(dl, false, &ws)
		}
	}
	pc.closed = true
	pc.mu.Unlock()
	err := pc.udp.Close()
	<-pc.done
	pc.mu.Lock()
	for _, d := range pc.dests {
		d.destroyAH()
	}
	for _, q := range pc.qps {
		q.free()
	}
	pc.qps, pc.dests, pc.conn = nil, nil, nil
	pc.mu.Unlock()
	pc.event()
	return err
}
