package verbs

// The receive path, as rxe_recv.c: the device's receive loop reads batches
// from the link, checks each datagram (parse, ICRC, P_Key), finds its QP
// (or the multicast group's QPs) and hands it to the QP, which checks its
// state and transport and passes it to the completer (responses) or the
// responder of its type (resp.go).

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// rxState is what the receive loop owns: the QPs whose ACK waits for the
// end of the batch being processed (at most one ACK per QP per batch), and
// whether the batch completed work (a poller may have been woken).
type rxState struct {
	mu   sync.Mutex     // held by the receive loop while it handles a batch
	ackq []*QP          // QPs whose positive ACK is deferred to the end of the batch (tx.go)
	woke atomic.Bool    // the batch completed work
	kick bool           // a packet of the batch queued an ACK that must leave at once
	icrc wire.ICRCCache // the receive loop's ICRC prefix of a stream's packets
	// late: the packet being dispatched is an RC WRITE MIDDLE or LAST whose
	// ICRC is not checked yet (checkLate): the responder checks it while it
	// copies the payload into the MR, if nothing else happens before.
	late   bool
	lateLP *link.Packet
	// now is the time of the batch being handled, read at its first use
	// (nowSet; QP.rxNow): a READ's responses arrive 64 to a batch, and
	// each is an answer that restarts the retransmit timer.
	now    time.Time
	nowSet bool
	// events are the CQ events the batch raised (CQ.push with batched):
	// raised at its end, once every completion it makes is in its CQ, as
	// a NIC interrupts after writing its CQEs (raiseEvents).
	events []*CQ
}

// raiseEvents raises the CQ events the batch being ended deferred (under
// rx.mu): a reply and the ACK of the message it answers arrive in one
// batch (one UDP GSO buffer), and a program woken by the reply's event
// finds the send completion the ACK makes in its CQ too (perftest's event
// mode waits on one channel for both CQs and polls each once per event).
//
// A CQ destroyed since its completion (its QP destroyed first, between the
// completion and the batch's end) raises nothing.
func (d *Device) raiseEvents() {
	for i, cq := range d.rx.events {
		cq.mu.Lock()
		gone := cq.destroyed
		cq.mu.Unlock()
		if !gone {
			cq.raise()
		}
		d.rx.events[i] = nil
	}
	d.rx.events = d.rx.events[:0]
}

// rxLoop is the device's receive loop: it reads batches from the link and
// dispatches each datagram, then ends the batch (the deferred ACKs and the
// replies go out, tx.go).
func (d *Device) rxLoop() {
	defer d.wg.Done()
	d.readLoop(d.ep, d.cfg.BusyPoll)
}

// readLoop reads ep until it closes (or the device does), handing each
// batch to handleBatch: the device's link, or a multicast group's endpoint
// (mcast.go).
func (d *Device) readLoop(ep link.Endpoint, busyPoll time.Duration) {
	bs := ep.BatchSize()
	if bs <= 0 {
		bs = 1
	}
	bs = min(bs, 64)
	pkts := make([]link.Packet, bs)
	for i := range pkts {
		pkts[i].Buf = make([]byte, maxDatagram)
	}
	var p wire.Packet
	// A batch that woke a consumer leaves the processor to it after the
	// link's step, not inside it (handleBatch): other readers of the link
	// wait for the step to end.
	owed := false
	handle := func(batch []link.Packet) { owed = d.handleBatch(batch, &p, true) || owed }
	after := func() {
		if owed {
			owed = false
			d.yieldSend()
		}
	}
	read := ep.ReadBatch
	if vr, ok := ep.(viewReader); ok {
		read = vr.ReadBatchView
	}
	sv, serve := ep.(viewServer)
	for {
		var err error
		if serve {
			err = sv.ServeSteps(pkts, busyPoll, handle, after)
		} else {
			var n int
			n, err = read(pkts)
			handle(pkts[:n])
			after()
		}
		if err == nil {
			continue
		}
		if d.closed.Load() || errors.Is(err, net.ErrClosed) {
			return
		}
		if d.log != nil {
			d.log.Debug("read batch", "err", err)
		}
		select {
		case <-d.done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// handleBatch dispatches a batch of received datagrams (p is the caller's
// scratch packet), then ends the batch: the deferred ACKs and the replies
// go out (tx.go). yield lets a consumer the batch woke run first (the
// receive loop): handleBatch then reports that it left the sending to the
// caller's yieldSend, once the caller holds nothing another reader waits
// for. PollLink's caller is the consumer.
func (d *Device) handleBatch(batch []link.Packet, p *wire.Packet, yield bool) (owed bool) {
	d.rx.mu.Lock()
	if d.closed.Load() {
		d.rx.mu.Unlock()
		return false // closing: the link is about to close (Close)
	}
	d.rx.nowSet = false
	for i := range batch {
		d.dispatch(&batch[i], p, true)
		if d.rx.kick {
			d.rx.kick = false
			d.kick()
		}
	}
	owed = d.endBatch(yield)
	d.rx.mu.Unlock()
	return owed
}

// linkPoller is a link that a second reader may poll beside its receive
// loop without waiting (link/udp's Poll): reads and the handling of what
// they got are serialized with ServeView's, in the socket's order.
type linkPoller interface {
	Poll(pkts []link.Packet, handle func(pkts []link.Packet)) (int, error)
}

// rxPoller is PollLink's state: its own packets and scratch packet.
type rxPoller struct {
	mu     sync.Mutex
	lp     linkPoller // nil: the link cannot be polled
	pkts   []link.Packet
	p      wire.Packet
	handle func(batch []link.Packet)
}

// PollLink receives the datagrams the link holds now and handles them on
// the calling goroutine, without waiting; it returns how many it handled
// (0 when none were waiting, another PollLink or the receive loop was
// reading, or the link cannot be polled: only link/udp can). It is for a
// program that busy-polls its CQs on a thread of its own, as RDMA programs
// do (the C library's ibv_poll_cq calls it when a CQ is empty): a reply
// then reaches the CQ without a wake-up of the device's receive goroutine,
// as a NIC's would. The receive loop goes on beside it; datagrams are
// handled in the order they arrived. It does not allocate after its first
// call.
func (d *Device) PollLink() int {
	r := &d.rxp
	if r.lp == nil || d.closed.Load() || !r.mu.TryLock() {
		return 0
	}
	defer r.mu.Unlock()
	if d.tx.n.Load() > 0 {
		d.kick()
	}
	d.preparePoll()
	n, err := r.lp.Poll(r.pkts, r.handle)
	if err != nil && d.log != nil && !d.closed.Load() {
		d.log.Debug("poll link", "err", err)
	}
	if n > 0 {
		d.stats.RxPolled.Add(uint64(n))
	}
	return n
}

// preparePoll allocates PollLink's packets (r.mu held): views need no
// buffers of their own (a GRO link's Poll points them into its own).
func (d *Device) preparePoll() {
	r := &d.rxp
	if r.pkts != nil {
		return
	}
	bs := min(max(d.ep.BatchSize(), 1), 64)
	r.pkts = make([]link.Packet, bs)
	if g, ok := r.lp.(groLink); !ok || !g.GRO() {
		for i := range r.pkts {
			r.pkts[i].Buf = make([]byte, maxDatagram)
		}
	}
	r.handle = func(batch []link.Packet) { d.handleBatch(batch, &r.p, false) }
}

// groLink is a link whose reads hand out views of its own GRO buffers
// (link/udp with UDP_GRO): a reader's packets need no buffers.
type groLink interface{ GRO() bool }

// pollPreparer is a link that can allocate its Poll's receive state ahead
// of the first call (link/udp).
type pollPreparer interface{ PreparePoll() }

// PreparePollLink allocates what PollLink's first call would, here and in
// the link, so that a program that will poll the link (the C library,
// when it opens a device) pays for it while it sets up rather than in its
// first poll. PollLink needs no call to it first.
func (d *Device) PreparePollLink() {
	r := &d.rxp
	if r.lp == nil || d.closed.Load() {
		return
	}
	r.mu.Lock()
	d.preparePoll()
	r.mu.Unlock()
	if p, ok := r.lp.(pollPreparer); ok {
		p.PreparePoll()
	}
}

// linkWaiter is a link a program's thread can wait on for datagrams
// itself (link/udp's WaitReadable).
type linkWaiter interface {
	WaitReadable(fd int, timeout time.Duration) (sock, other bool, err error)
}

// ErrInterrupted is WaitLink's error when a signal interrupted the wait
// (errors.Is(err, syscall.EINTR)): a C caller returns EINTR, as a blocking
// system call does.
var ErrInterrupted = newErr("wait link", "interrupted by a signal", syscall.EINTR)

// errNoLinkWait is WaitLink's error for a link that cannot be waited on.
var errNoLinkWait = newErr("wait link", "the device's link cannot be waited on (only link/udp's can)", syscall.EOPNOTSUPP)

// WaitLink waits on the calling goroutine's thread until the device's link
// holds a datagram (for PollLink to take) or fd (-1: none) is readable, at
// most timeout, and reports which. The device's receive loop steps aside
// meanwhile, so that the datagram wakes this thread alone: for a program
// thread that blocks for a completion and would otherwise be woken through
// the device's goroutine, two thread wake-ups where a kernel socket takes
// one (the C library's blocking rsocket calls). It fails, having waited
// for nothing, when the link cannot be waited on (only link/udp's can;
// EOPNOTSUPP) or the device is closed (ErrClosed), and with
// ErrInterrupted when a signal reached the thread while it waited.
func (d *Device) WaitLink(fd int, timeout time.Duration) (link, other bool, err error) {
	lw, isW := d.ep.(linkWaiter)
	if !isW || d.rxp.lp == nil {
		return false, false, errNoLinkWait
	}
	if d.closed.Load() {
		return false, false, ErrClosed
	}
	l, o, err := lw.WaitReadable(fd, timeout)
	if err != nil {
		if errors.Is(err, syscall.EINTR) {
			return false, false, ErrInterrupted
		}
		return false, false, err
	}
	return l, o, nil
}

// CanPollLink reports whether PollLink can receive from the device's link
// (link/udp can; the in-memory pipe cannot, and PollLink then returns 0).
func (d *Device) CanPollLink() bool { return d.rxp.lp != nil }

// viewServer is a link that runs the receive loop itself (link/udp): it
// hands each batch to handle in place, as viewReader, and keeps one wait on
// its socket across batches, so that a drained socket is not read again
// before it becomes readable (one system call less per wake-up).
type viewServer interface {
	ServeSteps(pkts []link.Packet, busyPoll time.Duration, handle func(pkts []link.Packet), after func()) error
}

// viewReader is a link that can hand out received datagrams in place
// (link/udp with GRO): the views stay valid until the next read, and the
// receive loop is done with a batch (payloads placed, replies built) before
// it reads again, so each payload is copied once, into its memory region.
type viewReader interface {
	ReadBatchView(pkts []link.Packet) (int, error)
}

// maxDatagram is the buffer size for one RoCEv2 datagram.
const maxDatagram = wire.MaxPayload + 256

// input handles one received datagram and sends what it produces at once.
func (d *Device) input(lp *link.Packet, p *wire.Packet) { d.dispatch(lp, p, false) }

// dispatch handles one received datagram; batched (receive loop only)
// leaves the packets it produces for flushPending.
func (d *Device) dispatch(lp *link.Packet, p *wire.Packet, batched bool) {
	b := lp.Bytes()
	if len(b) == 0 {
		return // nothing arrived (a truncated datagram, a link's wake-up)
	}
	d.stats.RxPackets.Add(1)
	d.stats.RxBytes.Add(uint64(len(b)))
	if err := p.Parse(b); err != nil {
		if errors.Is(err, wire.ErrUnsupportedOpcode) {
			d.stats.DropUnsupported.Add(1) // CNPs are dropped (docs/protocol.md §1.4)
		} else {
			d.stats.DropMalformed.Add(1)
		}
		return
	}
	// A datagram from shared memory on this host (lp.Local) crossed no
	// wire that could flip a bit: its ICRC is not checked.
	if !d.cfg.NoICRCCheck && !lp.Local {
		switch {
		case lp.IPHdrLen > 0:
			if !wire.VerifyICRC(lp.IPHdr[:lp.IPHdrLen], lp.Src.Port(), lp.Dst.Port(), b) {
				d.stats.ICRCErrors.Add(1)
				return
			}
		case batched && checkLate(p):
			d.rx.late, d.rx.lateLP = true, lp
			defer d.endLate()
		case batched:
			if _, ok := d.rx.icrc.VerifyICRCAddrs(lp.Src, lp.Dst, b); !ok {
				d.stats.ICRCErrors.Add(1)
				return
			}
		default:
			if _, ok := wire.VerifyICRCAddrs(lp.Src, lp.Dst, b); !ok {
				d.stats.ICRCErrors.Add(1)
				return
			}
		}
	}
	// P_Key must match 0xFFFF: low 15 bits equal and a full member (docs/protocol.md §2.1).
	if p.BTH.PKey&0x7FFF != 0x7FFF {
		if d.checkNow() {
			d.stats.DropPKey.Add(1)
		}
		return
	}
	qpn := p.BTH.DestQP
	if qpn == 0 { // QP0 not supported (docs/protocol.md §2.1)
		if d.checkNow() {
			d.stats.DropNoQP.Add(1)
		}
		return
	}
	if qpn == MulticastQPN { // UD only: never checked late
		d.multicastInput(lp, p, batched)
		return
	}
	qp := d.qps.get(qpn)
	if qp == nil {
		if d.checkNow() {
			d.stats.DropNoQP.Add(1)
		}
		return
	}
	qp.input(lp, p, batched)
}

// checkLate reports whether p's ICRC may be checked late, as the responder
// copies its payload (wire.ICRCCache.VerifyICRCCopy): an RC WRITE MIDDLE, or
// a LAST without immediate data, of at least lateMin bytes. From 2 KiB on
// the check and the copy are one AVX-512 pass; below, they cost what they
// did apart.
// Such a packet's payload goes to the part of a WRITE in flight that it
// names by its position in the message, which its retransmission rewrites
// if it fails the check; what it would do otherwise waits for the check
// (checkNow). A bulk RDMA WRITE is nearly all MIDDLE packets.
func checkLate(p *wire.Packet) bool {
	op := p.BTH.Opcode
	return (op == wire.RCWriteMiddle || op == wire.RCWriteLast) && len(p.Payload) >= lateMin
}

// lateMin is the shortest payload whose ICRC is checked as it is copied.
const lateMin = 1024

// checkNow checks the ICRC of the packet being dispatched if it was left for
// later, counting a failure, and reports whether it passed (true if it was
// checked already).
func (d *Device) checkNow() bool {
	if !d.rx.late {
		return true
	}
	d.rx.late = false
	lp := d.rx.lateLP
	if _, ok := d.rx.icrc.VerifyICRCAddrs(lp.Src, lp.Dst, lp.Bytes()); !ok {
		d.stats.ICRCErrors.Add(1)
		return false
	}
	return true
}

// endLate ends the dispatch of a packet whose ICRC was left for later: every
// path checks it, by checkNow or memCopyChecked, before it acts on the packet.
func (d *Device) endLate() {
	d.rx.late, d.rx.lateLP = false, nil
}

// MulticastQPN is the destination QPN of multicast datagrams (docs/protocol.md §6.3).
const MulticastQPN = 0xFFFFFF

// multicastInput delivers a UD datagram sent to a multicast group to every
// QP attached to the group its destination address names (docs/protocol.md §6.3).
func (d *Device) multicastInput(lp *link.Packet, p *wire.Packet, batched bool) {
	g := lp.Dst.Addr().Unmap()
	// The link loops the device's own datagrams back; one from a QP made
	// with QPCreateBlockSelfMcastLB stops here.
	if p.Mask&wire.HasDETH != 0 && lp.Src.Addr().Unmap() == d.local.Addr().Unmap() {
		if s := d.qps.get(p.DETH.SrcQP); s != nil && s.noMcastLB {
			d.stats.DropMcastLoopback.Add(1)
			return
		}
	}
	d.qpMu.RLock()
	qps := d.mcast[g]
	var local [maxMcastQPs]*QP
	n := copy(local[:], qps)
	d.qpMu.RUnlock()
	if n == 0 {
		d.stats.DropNoQP.Add(1)
		return
	}
	for _, qp := range local[:n] {
		qp.input(lp, p, batched)
	}
}

// input handles one packet for this QP (called by the receive loop).
func (qp *QP) input(lp *link.Packet, p *wire.Packet, batched bool) {
	qp.mu.Lock()
	qp.rxBatched = batched
	defer qp.inputDone(batched)
	if qp.dev.rx.late && !qp.writeInPlace(lp, p) && !qp.dev.checkNow() {
		return
	}
	st := &qp.dev.stats
	// rxe receives from RTR on and drops packets for a side not yet ready (docs/protocol.md §5.9).
	if qp.state < QPStateRTR || qp.state == QPStateErr || qp.dead {
		st.DropQPState.Add(1)
		return
	}
	// The opcode's transport must match the QP type (docs/protocol.md §2.1).
	want := wire.TransportRC
	switch qp.typ {
	case QPTypeUC:
		want = wire.TransportUC
	case QPTypeUD:
		want = wire.TransportUD
	}
	if p.BTH.Opcode.Transport() != want {
		st.DropTransport.Add(1)
		return
	}
	if qp.state == QPStateRTR && !qp.commEst && qp.typ != QPTypeUD {
		// First packet in RTR: communication established (affiliated event;
		// the CM treats it like an RTU).
		qp.commEst = true
		qp.dev.event(AsyncEvent{Type: EventCommEst, QP: qp})
	}
	if qp.typ == QPTypeUD {
		qp.udReceive(lp, p)
		return
	}
	// RC/UC packets must come from the peer the AV names (docs/protocol.md §9).
	if lp.Src.Addr().Unmap() != qp.dst.Addr().Unmap() {
		st.DropSrcAddr.Add(1)
		return
	}
	if p.Mask&wire.IsResponse != 0 {
		if qp.typ == QPTypeRC {
			qp.completer(p)
		} else {
			st.DropTransport.Add(1)
		}
		return
	}
	qp.receive(p)
}

// rxNow returns the time: on the receive loop the batch's (read once per
// batch), else the clock's.
func (qp *QP) rxNow() time.Time {
	if !qp.rxBatched {
		return qp.dev.clock.Now()
	}
	r := &qp.dev.rx // input runs under r.mu when batched (handleBatch)
	if !r.nowSet {
		r.now, r.nowSet = qp.dev.clock.Now(), true
	}
	return r.now
}

// inputDone ends input: what the packet produced goes to the device's
// transmit queue; on the receive loop it is sent at the end of the batch
// (tx.go), otherwise at once.
func (qp *QP) inputDone(batched bool) {
	qp.rxBatched = false
	if batched {
		qp.stage()
		qp.txOwed = false // the receive loop sends at the end of the batch
		qp.mu.Unlock()
		return
	}
	qp.flushUnlock()
}
