package verbs

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// The device-wide send budget (docs/protocol.md §5.4). Each RC QP may have
// a window of maxUnackedPSNs packets unacknowledged, so 256 QPs streaming
// at once could put 65,536 packets (256 MiB) in flight, far more than the
// peer's socket buffer holds: the kernel drops what does not fit, and
// every drop costs a go-back-N retry or a retransmit timeout. The budget
// caps the packets a device's RC requesters have sent (or queued) and not
// yet seen acknowledged, across all QPs; sized from the link's receive
// buffer (the peer, built alike, has one as large), it keeps the sum of
// the windows inside what the peer can hold.
//
// A QP over the budget waits in a FIFO and is served, oldest first, as
// acknowledgements free the budget: with more QPs than the budget holds
// windows, they take turns (round-robin) instead of the QP whose ACK
// arrives first taking what its ACK freed. A turn is one grant, of at
// least budgetQuantum packets and at most a fair share (the budget over
// the QPs waiting, plus one): a QP served while much of the budget is free
// does not take a whole window while the next QPs get a quantum each (with
// a window as large as the budget, one turn was a whole 256-packet message
// and QPs finished three before others had one). A QP with nothing in
// flight that is not waiting may send one packet whatever the budget
// (budgetFloor): a small message does not wait for a turn. What a QP sent
// before a retransmit timeout expired stops counting until its peer
// answers, so a dead peer holds no budget for longer than a timeout.
// While QPs wait, what counts in flight is packets whose ACK ends a
// receive batch (which serves the FIFO), or whose timeout gives their
// count back (which serves it too). A QP with the retransmit timer off
// (timeout 0), which could not, stays outside the budget.

const (
	// budgetFloor is the packets a QP with nothing in flight, and not
	// waiting for a turn, may send whatever the budget.
	budgetFloor = 1
	// budgetQuantum is the least grant worth taking (unless the QP needs
	// fewer): a grant cut short ends with an ACK request, and grants of a
	// few packets each would cost an ACK per few packets. It is rxe's ACK
	// cadence, so a turn costs no more ACKs than streaming does.
	budgetQuantum = maxPktPerAck
	// budgetPktOverhead is the receive-buffer bytes a full-MTU packet is
	// reckoned to cost the peer's kernel: the payload and the headers,
	// plus the socket buffer's own per-datagram overhead.
	budgetPktOverhead = 512
	// maxBudget caps the budget whatever the buffer: 8 MiB of 4 KiB
	// packets, far above a data-centre path's bandwidth-delay product,
	// and well within the transmit path's buffer pool (txMaxFree), so that
	// a full budget queued at once allocates nothing. (Measured with 256
	// QPs streaming: 512 to 16,384 all stream as fast; past ~3,000 the
	// queue outgrows the pool.) It is also the budget on links that do not
	// tell their buffer.
	maxBudget = 2048
)

// sendBudget is the device's share of in-flight packets (see above).
type sendBudget struct {
	limit    int64        // packets; 0: no budget
	quantum  int64        // the least turn: budgetQuantum, or less for a small limit
	inflight atomic.Int64 // packets RC QPs have sent and not seen acknowledged
	nwait    atomic.Int32 // len(wait), readable without mu
	mu       sync.Mutex
	wait     []*QP      // QPs over the budget, oldest first
	spare    []*QP      // serveBudget's other FIFO slice (under serving)
	serving  sync.Mutex // held by serveBudget
	// serveSoon: a goroutine budgetFreed started has yet to serve.
	serveSoon atomic.Bool
}

// init sets the budget for a device on ep with active MTU mtu, given
// Config.InflightBudget (cfg).
func (b *sendBudget) init(cfg int, ep link.Endpoint, mtu wire.MTU) {
	b.limit = budgetLimit(cfg, ep, mtu)
	b.quantum = min(budgetQuantum, max(b.limit/4, 1))
}

// budgetLimit returns the budget for a device on ep with active MTU mtu,
// given Config.InflightBudget (cfg): 0 for none.
func budgetLimit(cfg int, ep link.Endpoint, mtu wire.MTU) int64 {
	switch {
	case cfg > 0:
		return int64(cfg)
	case cfg < 0:
		return 0
	}
	n := maxBudget
	if b := link.CapabilitiesOf(ep).ReceiveBuffer; b > 0 {
		n = b / (mtu.Bytes() + budgetPktOverhead)
	}
	return int64(min(max(n, budgetFloor), maxBudget))
}

// warnSmall logs, once per device, a budget computed from the link's
// receive buffer that is smaller than one QP's send window: a single RC
// stream then stops at the budget, not at its window (with link/udp and a
// distribution's default net.core.rmem_max, as non-root, a stream runs
// well below its rate with a larger buffer; docs/speed.md, "How the
// transport gets there"). A budget the user set (cfg) is not warned about.
func (b *sendBudget) warnSmall(log *slog.Logger, cfg int, ep link.Endpoint) {
	if log == nil || cfg != 0 || b.limit == 0 || b.limit >= maxUnackedPSNs {
		return
	}
	size := link.CapabilitiesOf(ep).ReceiveBuffer
	log.Warn("verbs: the send budget is smaller than one QP's send window, so a single RC stream will be "+
		"slower than it could be; give the link a larger receive buffer (link/udp sockets: net.core.rmem_max "+
		"and wmem_max cap it unless the process has CAP_NET_ADMIN)",
		"budget_packets", b.limit, "window_packets", maxUnackedPSNs, "receive_buffer_bytes", size)
}

// budgetIdle reports a QP that waits for its turn with everything it sent
// acknowledged (its lock held): a retransmit timeout then is no sign of a
// lost packet or a dead peer, and spends no retry (onRetryTimer).
func (qp *QP) budgetIdle() bool {
	return qp.budgetWaiting && wire.PSNDiff(qp.req.sentPSN, qp.compPSN()) <= 0
}

// budgeted reports whether the QP's new packets come out of the budget:
// an RC QP on a device with one, whose retransmit timer is on. A QP with
// the timer off (timeout 0) would never notice a dead peer, so could not
// give its share back: it neither counts nor waits, as before the budget.
func (qp *QP) budgeted() bool {
	return qp.typ == QPTypeRC && qp.dev.budget.limit != 0 && qp.attr.Timeout != 0
}

// budgetGrant asks for up to need new packets in flight for an RC QP (its
// lock held) and counts what it grants (qp.req.grant, used up by the
// packets the QP builds next). A QP that waits must hear back: the last
// packet of a grant the budget cut short asks for an ACK (sendWQEPackets),
// and a QP whose newest packet did not ask gets one packet more, which does. False means none is left: the QP waits in the FIFO and
// is served again (serveBudget) when acknowledgements free some.
func (qp *QP) budgetGrant(need int32) bool {
	b := &qp.dev.budget
	need = max(need, 1)
	for {
		cur := b.inflight.Load()
		var avail int32
		if n := b.nwait.Load(); qp.budgetServed || n == 0 {
			avail = int32(min(max(b.limit-cur, 0), 1<<30))
			if qp.budgetServed {
				avail = int32(min(int64(avail), max(b.quantum, b.limit/int64(n+1))))
			}
		}
		if int64(avail) < min(int64(need), b.quantum) {
			avail = 0 // a crumb would cost an ACK per few packets: wait for a turn
		}
		if !qp.budgetWaiting && !qp.budgetServed {
			avail = max(avail, budgetFloor-qp.req.counted)
		}
		if avail <= 0 && qp.req.counted > 0 && !qp.req.tailAckReq {
			// The newest packet in flight did not ask for an ACK
			// (a grant the window, not the budget, ended): one more
			// packet, which asks, so that the QP hears back while it
			// waits (its retransmit timer would expire otherwise).
			avail, need = 1, 2
		}
		if avail <= 0 {
			if !qp.budgetWaiting {
				if h := qp.dev.cfg.hooks; h != nil && h.budgetWait != nil {
					h.budgetWait(qp)
				}
				qp.budgetWaiting = true
				b.mu.Lock()
				b.wait = append(b.wait, qp)
				b.nwait.Store(int32(len(b.wait)))
				b.mu.Unlock()
				qp.dev.stats.BudgetWaits.Add(1)
			}
			return false
		}
		g := min(need, avail)
		if !b.inflight.CompareAndSwap(cur, cur+int64(g)) {
			continue
		}
		qp.req.grant, qp.req.grantCut = g, g < need
		qp.req.counted += g
		// A turn is one grant: what the QP needs after it, it waits for
		// at the end of the FIFO.
		qp.budgetServed = false
		if hw := &qp.dev.stats.InflightMax; uint64(cur+int64(g)) > hw.Load() {
			hw.Store(uint64(cur + int64(g))) // a high-water mark; racing stores may lose a little
		}
		return true
	}
}

// budgetRead counts the PSNs of a new READ (or atomic) request, one
// request packet answered by npkts responses, against the budget (the
// QP's lock held); false: wait, as budgetGrant. The responses are what
// the budget is for, but a READ is one request: it goes when one packet
// may.
func (qp *QP) budgetRead(npkts int32) bool {
	if !qp.budgeted() {
		return true
	}
	if !qp.budgetGrant(1) {
		return false
	}
	qp.req.grant = 0
	if k := int64(npkts - 1); k > 0 {
		qp.req.counted += npkts - 1
		qp.dev.budget.inflight.Add(k)
	}
	return true
}

// budgetReturn gives back what is left of the QP's grant (its lock held),
// at the end of a round of sending.
func (qp *QP) budgetReturn() {
	if g := qp.req.grant; g > 0 {
		qp.req.grant = 0
		qp.req.counted -= g
		qp.dev.budget.inflight.Add(-int64(g))
	}
}

// budgetSync recounts what an RC QP has in flight after acknowledgements or
// a state change (its lock held): the PSNs sent and not yet completed, and
// its grant, while it can send; none once it cannot, nor after a
// retransmit timeout until the peer answers again.
func (qp *QP) budgetSync() {
	if qp.typ != QPTypeRC || qp.dev.budget.limit == 0 {
		return
	}
	var want int32
	switch {
	case !qp.sending() || qp.dead || qp.attr.Timeout == 0:
		qp.req.grant = 0
	case qp.req.budgetLost:
		want = qp.req.grant
	default:
		want = max(wire.PSNDiff(qp.req.sentPSN, qp.compPSN()), 0) + qp.req.grant
	}
	if d := want - qp.req.counted; d != 0 {
		qp.req.counted = want
		qp.dev.budget.inflight.Add(int64(d))
	}
}

// budgetFreed is budgetSync for a state change outside the receive loop
// (the QP's lock held): what the QP no longer counts is served to the
// waiting QPs at once, as no acknowledgement may come to end a batch.
func (qp *QP) budgetFreed() {
	before := qp.req.counted
	qp.budgetSync()
	b := &qp.dev.budget
	if qp.req.counted < before && b.nwait.Load() > 0 && !qp.dev.closed.Load() &&
		b.serveSoon.CompareAndSwap(false, true) {
		// One goroutine however many QPs give back at once (a dead
		// peer's QPs time out together); it serves what they all freed.
		go func() {
			b.serveSoon.Store(false)
			qp.dev.serveBudget()
		}()
	}
}

// serveBudget lets the QPs waiting for the budget send, oldest first, while
// it lasts; a QP the budget runs out on again goes back to the end of the
// FIFO. The receive loop calls it at the end of a batch, with no QP lock
// held; budgetFreed calls it for what a state change gave back. It sends
// what it queued.
func (d *Device) serveBudget() {
	b := &d.budget
	if b.nwait.Load() == 0 || b.limit-b.inflight.Load() < b.quantum {
		return
	}
	b.serving.Lock()
	defer b.serving.Unlock()
	b.mu.Lock()
	w := b.wait
	b.wait = b.spare[:0]
	b.mu.Unlock()
	i := 0
	for ; i < len(w) && b.limit-b.inflight.Load() >= b.quantum; i++ {
		qp := w[i]
		w[i] = nil
		qp.mu.Lock()
		qp.budgetWaiting = false
		if qp.sending() && !qp.dead {
			qp.budgetServed = true
			qp.reqProgress()
			qp.budgetServed = false
		}
		// Sent all at once, below.
		qp.stage()
		qp.txOwed, qp.inPost = false, false
		qp.mu.Unlock()
	}
	d.kick()
	b.mu.Lock()
	if i < len(w) {
		// The budget ran out first: the rest wait on, ahead of the QPs
		// that joined meanwhile.
		joined := b.wait
		r := copy(w, w[i:])
		clear(w[r:])
		b.wait = append(w[:r], joined...)
		b.spare = joined[:0]
	} else {
		b.spare = w[:0]
	}
	b.nwait.Store(int32(len(b.wait)))
	b.mu.Unlock()
}
