package verbs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// This file is the device's transmit path, shared by all its QPs (rxe
// hands every QP's packets to one netdev queue; gVisor's and the kernel's
// qdiscs let whoever enqueues also run the queue).
//
// A QP builds packets under its lock into its staging batch (qp.txb), with
// buffers from the device's pool, and hands them to the device queue
// (stage) — a copy of the packet descriptors, not of the bytes. Sending is
// done by whoever hands packets over and finds no one else sending (kick),
// after releasing the QP's lock: it writes everything queued, for all QPs,
// in as few WriteBatch calls as the link allows, and loops while more
// arrives. No QP lock is held across a system call except as backpressure,
// when the queue is past txHighWater (a producer that outruns the link then
// pays for sending).
//
// The receive loop hands over what a received batch produced as it goes
// and sends once at the batch's end; positive ACKs wait for that end too,
// one per QP (the latest PSN, as ACKs are cumulative), and go out ahead of
// any other packet the QP builds before then — the reply a woken consumer
// posts carries the ACK out in the same system call.

// txPath is the device's transmit queue and buffer pool.
type txPath struct {
	mu    sync.Mutex
	q     []link.Packet // handed over, waiting to be sent, in order
	qref  []zcRef       // what q[i] lends (zero-copy send, zc.go)
	free  [][]byte      // packet buffers not in use
	n     atomic.Int64  // len(q), readable without mu
	busy  atomic.Bool   // a goroutine is in kick's send loop
	spare []link.Packet // the sender's other queue (owned by the sender)
	sref  []zcRef       // and its references
	// tailAck is the QP whose deferred ACK is the last packet queued (nil
	// if the last is anything else): a few requests its PostSend adds go
	// ahead of it (enqueue), ackAhead of them so far.
	tailAck  *QP
	ackAhead int
	// flushSoon's timer (made stopped by Open) and whether it is armed.
	flushTimer clock.Timer
	flushArmed atomic.Bool
}

const (
	// txHighWater is the queue length past which a producer sends itself
	// (if no one else is) before it goes on building packets: a staging
	// batch's worth, so that a long burst (a window of a WRITE, a READ's
	// responses) starts leaving while the rest is built — on loopback the
	// peer starts processing sooner (in one process a stream built whole
	// windows ahead of its first send was measurably slower; two processes
	// gain nothing from a smaller value, and each chunk is a system call;
	// docs/speed.md, "Numbers behind code comments").
	txHighWater = 64
	// txMaxFree caps the pooled buffers kept for reuse.
	txMaxFree = 4096
	// ackBehind is the most packets a post may put ahead of its QP's ACK
	// waiting at the end of the queue (enqueue).
	ackBehind = 4
)

// getBuf returns a transmit buffer of maxDatagram bytes. It takes the
// pool's lock once per packet rather than refilling the QP's staging slots
// in bulk: the buffer is then the most recently freed (warm in cache) and
// an idle QP holds none — with 10,000 QPs, per-QP buffers were the top
// cache-miss site. Profiled on a 1 MiB WRITE stream the lock does not
// show (docs/speed.md).
func (d *Device) getBuf() []byte {
	t := &d.tx
	t.mu.Lock()
	if k := len(t.free); k > 0 {
		b := t.free[k-1]
		t.free[k-1] = nil
		t.free = t.free[:k-1]
		t.mu.Unlock()
		return b
	}
	t.mu.Unlock()
	return make([]byte, maxDatagram)
}

// enqueue hands qp's packets pkts over to the device queue; their buffers
// now belong to the queue (the caller's slots are cleared). ack says pkts
// is the QP's deferred ACK alone. It reports whether the queue is past its
// high-water mark.
//
// A post of a few requests (at most ackBehind, with those of earlier posts
// that went ahead) on the QP whose ACK is the last packet queued goes ahead
// of that ACK: a reply then leaves first and
// the ACK of the message it answers right behind it — the shorter one last,
// so that UDP GSO sends both as one buffer — while everything queued
// before the ACK (and so before the consumer the batch woke could add
// anything, on any QP) still leaves before it.
func (d *Device) enqueue(qp *QP, pkts []link.Packet, refs []zcRef, ack bool) bool {
	t := &d.tx
	t.mu.Lock()
	if t.tailAck == qp && qp.inPost && t.ackAhead+len(pkts) <= ackBehind {
		t.ackAhead += len(pkts)
		k := len(t.q) - 1
		a, r := t.q[k], t.qref[k]
		t.q, t.qref = append(t.q[:k], pkts...), append(t.qref[:k], refs...)
		t.q, t.qref = append(t.q, a), append(t.qref, r)
		d.stats.ACKsBehindReply.Add(1)
	} else {
		t.q = append(t.q, pkts...)
		t.qref = append(t.qref, refs...)
		t.tailAck, t.ackAhead = nil, 0
		if ack {
			t.tailAck = qp
		}
	}
	n := len(t.q)
	t.n.Store(int64(n))
	t.mu.Unlock()
	for i := range pkts {
		pkts[i].Buf, pkts[i].Data = nil, nil
		refs[i] = zcRef{}
	}
	return n > txHighWater
}

// kick sends everything queued unless another goroutine is sending (that
// one then sends what was queued before kick was called, too).
func (d *Device) kick() {
	t := &d.tx
	for t.n.Load() > 0 {
		if !t.busy.CompareAndSwap(false, true) {
			return
		}
		for {
			t.mu.Lock()
			b := t.q
			if len(b) == 0 {
				t.mu.Unlock()
				break
			}
			refs := t.qref
			t.q, t.qref = t.spare[:0], t.sref[:0]
			t.tailAck = nil
			t.n.Store(0)
			t.mu.Unlock()
			d.write(b)
			for i := range refs {
				refs[i].release() // written (or failed): the kernel is done with lent memory
			}
			t.mu.Lock()
			for i := range b {
				if len(t.free) < txMaxFree {
					t.free = append(t.free, b[i].Buf)
				}
				b[i].Buf, b[i].Data = nil, nil
			}
			t.mu.Unlock()
			t.spare, t.sref = b[:0], refs[:0]
		}
		t.busy.Store(false)
		// Packets queued after the last swap by a goroutine that found
		// busy set are sent by the next round.
	}
}

// write writes pkts to the link, counting what it sends. They are counted
// before the link sends them, and uncounted if it does not: on loopback the
// peer may take them, answer, and complete the work (and a program read the
// counters) before WriteBatch returns.
func (d *Device) write(pkts []link.Packet) {
	d.countTx(pkts, 1)
	for len(pkts) > 0 {
		n, err := d.ep.WriteBatch(pkts)
		pkts = pkts[n:]
		if err != nil {
			if len(pkts) > 0 {
				// Skip the failing packet: RC recovers by retransmission.
				d.stats.TxErrors.Add(1)
				d.countTx(pkts[:1], -1)
				pkts = pkts[1:]
			}
			if d.closed.Load() {
				d.countTx(pkts, -1)
				break
			}
		}
	}
}

// countTx adds pkts to (sign 1) or takes them from (-1) TxPackets and
// TxBytes.
func (d *Device) countTx(pkts []link.Packet, sign int64) {
	var bytes int64
	for i := range pkts {
		bytes += int64(pkts[i].Len()) // with a zero-copy payload
	}
	d.stats.TxBytes.Add(uint64(sign * bytes))
	d.stats.TxPackets.Add(uint64(sign * int64(len(pkts))))
}

// endBatch ends a received batch: the deferred ACKs are handed to the
// queue and everything queued is sent. When the batch's completions woke a
// consumer and yield is set, it sends nothing and reports so (owed): the
// receive loop gives the consumer the processor first, after the step, and
// then sends (yieldSend), so that a reply the consumer posts leaves with
// the ACKs, in one system call. A caller polling on a program's thread
// (PollLink) does not yield: it is the consumer, and a Gosched on a thread
// locked to its goroutine hands the processor to another thread and back
// (two thread wake-ups). Instead, when the batch completed work, what it
// queued (its ACKs) waits for that consumer's next post or poll, so that a
// reply leaves with the ACK in one system call (flushSoon bounds the wait).
func (d *Device) endBatch(yield bool) (owed bool) {
	d.raiseEvents()
	for i, qp := range d.rx.ackq {
		qp.mu.Lock()
		qp.resp.ackQueued = false
		if qp.resp.ackPend {
			qp.emitAck()
			qp.stageAck()
		}
		// The send after the woken consumer's turn carries the ACK: a
		// PostRecv, or a post that adds nothing, must not send the ACK
		// alone meanwhile.
		qp.txOwed = false
		qp.mu.Unlock()
		d.rx.ackq[i] = nil
	}
	d.rx.ackq = d.rx.ackq[:0]
	if d.rx.woke.Load() {
		d.rx.woke.Store(false)
		if yield {
			return true
		}
		d.serveBudget()
		d.flushSoon()
		return false
	}
	d.serveBudget()
	d.kick()
	return false
}

// yieldSend is the receive loop's end of a batch that woke a consumer
// (endBatch reported it owed): the consumer runs first, with no lock held,
// then what is queued is sent under the receive lock, as it was at the end
// of the batch: Close sends what is queued under that lock before it closes
// the link, and must not find this send in progress (its kick would leave
// the queue to it, and the link would close under it: the batch's ACK lost).
func (d *Device) yieldSend() {
	runtime.Gosched()
	d.rx.mu.Lock()
	if !d.closed.Load() { // else Close sent it, and the link is closing
		d.serveBudget()
		d.kick()
	}
	d.rx.mu.Unlock()
}

// pollFlushDelay bounds how long packets a polled batch queued (its ACKs)
// wait for the polling consumer's next post or poll (endBatch): a program
// that stops calling the library still sends them within it.
const pollFlushDelay = 200 * time.Microsecond

// flushSoon makes sure what is queued is sent within pollFlushDelay, if
// no post, poll or receive batch sends it first. The timer is armed at most
// once per delay, not per batch: a ping-pong defers an ACK every message.
func (d *Device) flushSoon() {
	t := &d.tx
	if t.n.Load() == 0 || t.flushArmed.Swap(true) {
		return
	}
	t.flushTimer.Reset(pollFlushDelay)
}

// flushTimerFired is flushSoon's timer: it sends what is still queued.
func (d *Device) flushTimerFired() {
	d.tx.flushArmed.Store(false)
	if !d.closed.Load() {
		d.kick()
	}
}

// stage hands the QP's staged packets to the device queue (the QP then
// owes a kick: flushUnlock sends); past the queue's high-water mark it
// sends at once, holding the QP's lock (backpressure).
func (qp *QP) stage() {
	if qp.txn == 0 {
		return
	}
	full := qp.dev.enqueue(qp, qp.txb[:qp.txn], qp.txref[:qp.txn], false)
	qp.txn = 0
	qp.txOwed = true
	if full {
		qp.dev.kick()
	}
}

// stageAck is stage for the QP's deferred ACK, built alone at the end of a
// received batch.
func (qp *QP) stageAck() {
	qp.dev.enqueue(qp, qp.txb[:qp.txn], qp.txref[:qp.txn], qp.txn == 1)
	qp.txn = 0
	qp.txOwed = true
}

// flushUnlock hands the staged packets over, unlocks the QP and, if it
// handed any over since the last flushUnlock, sends. (A call that adds
// nothing leaves the queue to whoever filled it: the receive loop sends
// its ACKs after a woken consumer had the chance to add its reply.)
func (qp *QP) flushUnlock() {
	qp.stage()
	owed := qp.txOwed
	qp.txOwed, qp.inPost = false, false
	qp.mu.Unlock()
	if owed {
		qp.dev.kick()
	}
}

// postUnlock ends PostSend: as flushUnlock, except that a post on an
// ACK-clocked QP (clocked) leaves its packets in the queue for the
// receive loop, unless the QP left RTS or stopped for an RNR wait. The
// answer it waits for may have been lost (the tail of a READ's responses,
// the ACK of a window): flushSoon bounds the wait to pollFlushDelay, not
// the loss probe's 10 ms or more. (Queued packets may lend MR memory,
// zc.go: a deregistration or a provider's revocation then sends the queue
// itself rather than wait for it.)
func (qp *QP) postUnlock(clocked bool) {
	if clocked && qp.state == QPStateRTS && !qp.comp.rnrWait {
		qp.stage()
		if qp.txOwed {
			qp.txOwed, qp.inPost = false, false
			qp.mu.Unlock()
			qp.dev.flushSoon()
			return
		}
	}
	qp.flushUnlock()
}

// txPacket returns the next staging slot (with a buffer), handing a full
// staging batch over first.
func (qp *QP) txPacket() *link.Packet {
	if qp.txb == nil {
		// Made at the first packet: a QP that never sends (a connection
		// set up and torn down, a receive-only QP) does not carry it.
		bs := min(max(qp.dev.ep.BatchSize(), 1), 32)
		qp.txb = make([]link.Packet, bs)
		qp.txref = make([]zcRef, bs)
	}
	if qp.txn == len(qp.txb) {
		qp.stage()
	}
	p := &qp.txb[qp.txn]
	if p.Buf == nil {
		p.Buf = qp.dev.getBuf()
	}
	qp.txn++
	return p
}

// deferAck records a positive ACK for psn to be sent at the end of the
// received batch (or before the next packet the QP builds), replacing an
// earlier one of the same batch: ACKs are cumulative.
func (qp *QP) deferAck(psn uint32) {
	r := &qp.resp
	if !r.ackPend {
		r.ackPend = true
		if !r.ackQueued {
			r.ackQueued = true
			qp.dev.rx.ackq = append(qp.dev.rx.ackq, qp)
		}
	}
	r.ackPSN, r.ackMSN = psn, r.msn
}

// emitAck builds the deferred ACK, if any.
func (qp *QP) emitAck() {
	r := &qp.resp
	if !r.ackPend {
		return
	}
	r.ackPend = false
	qp.buildAck(r.ackPSN, wire.SyndromeACK, r.ackMSN)
}
