package rping

import (
	"time"

	"github.com/softroce/softroce/verbs"
)

// Liveness of an rping/krping connection. rping and krping wait for the
// peer's next message with no bound: a peer killed between two messages
// (kill -9: no DREQ) leaves the survivor waiting forever. While a test
// runs, a side that has waited keepalive without news posts a
// zero-length RDMA WRITE (no memory touched, any rkey: IBA C9-88, as
// kernel rxe), which the transport retries until the peer ACKs it; a dead
// peer makes it complete with RETRY_EXC_ERR, and the tool says so in one
// line and exits non-zero. A live peer's HCA ACKs it; nothing else sees it.

// probeWRID marks the keepalive WRITE's completion.
const probeWRID = ^uint64(0) - 0xAC

var (
	// keepalive is how long a waiting side stays silent before it
	// probes the peer.
	keepalive = 2 * time.Second
	// toolACKTimeout, if nonzero, is the local ACK timeout of the tools'
	// QPs (tests shorten the transport's retry budget).
	toolACKTimeout uint8
)

// live reports whether the connection is up and being tested.
func (cb *rcb) live() bool {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.testing && cb.qp != nil && !cb.failed && cb.state != stDisconnected && cb.state != stError
}

// probe posts the keepalive WRITE unless one is outstanding.
func (cb *rcb) probe() {
	cb.mu.Lock()
	if cb.probing {
		cb.mu.Unlock()
		return
	}
	cb.probing = true
	// The CQ goroutine's onRecv rewrites the peer's advertisement under mu.
	qp, addr, rkey := cb.qp, cb.remoteAddr, cb.remoteRKey
	cb.mu.Unlock()
	if _, err := qp.PostSend([]verbs.SendWR{{WRID: probeWRID, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		RemoteAddr: addr, RKey: rkey}}); err != nil {
		cb.mu.Lock()
		cb.probing = false
		cb.mu.Unlock()
	}
}

// probeDone handles the keepalive's completion: it reports whether the
// connection is lost (then the state is ERROR and the waiter woken).
func (cb *rcb) probeDone(wc *verbs.WC) bool {
	cb.mu.Lock()
	cb.probing = false
	cb.mu.Unlock()
	switch wc.Status {
	case verbs.WCSuccess:
		return false
	case verbs.WCWRFlushErr:
		return false // the QP is going down anyway
	}
	cb.lost(wc.Status)
	return true
}

// lost reports a connection whose peer stopped answering, in one line.
func (cb *rcb) lost(st verbs.WCStatus) {
	cb.errf("%sconnection lost: the peer stopped answering (a keepalive RDMA WRITE got no ACK after the transport's retries: status %d, %v)\n",
		cb.whoPrefix(), int(st), st)
	cb.setCQErr()
	cb.setState(stError)
	cb.post()
}

// whoPrefix is "rping: " for rping's own lines (krping's errf adds "krping: ").
func (cb *rcb) whoPrefix() string {
	if cb.o.prefix != "" {
		return ""
	}
	return "rping: "
}

// waitLive is wait with the keepalive: it probes the peer after each
// keepalive without news (polling the CQ for the probe itself when
// the test polls, as krping's perf modes).
func (cb *rcb) waitLive() {
	if !cb.live() {
		<-cb.sem
		return
	}
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case <-cb.sem:
			return
		case <-t.C:
			if !cb.live() {
				continue
			}
			if cb.polling {
				cb.pollProbe()
			}
			cb.probe()
		}
	}
}

// pollProbe reaps a probe completion in the polling modes (where no CQ
// thread runs); other completions there belong to the test: it holds them
// for the test's next pollCQ, in order.
func (cb *rcb) pollProbe() {
	var wc [1]verbs.WC
	for cb.cq.Poll(wc[:]) == 1 {
		if !cb.isProbe(&wc[0]) {
			cb.held = append(cb.held, wc[0])
		}
	}
}

// pollCQ is the polling modes' CQ poll: the completions pollProbe or
// reapProbe took off the CQ come first. Only the test's goroutine calls it.
func (cb *rcb) pollCQ(wc []verbs.WC) int {
	if len(cb.held) == 0 {
		return cb.cq.Poll(wc)
	}
	n := copy(wc, cb.held)
	cb.held = cb.held[n:]
	return n
}

// maybeProbe is for the busy-wait loops of krping's perf modes: call it
// now and then; it probes after keepalive since *since. The loop
// handles the probe's completion (isProbe).
func (cb *rcb) maybeProbe(since *time.Time) {
	if time.Since(*since) >= keepalive && cb.live() {
		*since = time.Now()
		cb.probe()
	}
}

// reapProbe polls the CQ for an outstanding probe's completion (holding
// any other completion for the test's pollCQ); it reports whether the
// connection is lost.
func (cb *rcb) reapProbe() bool {
	cb.mu.Lock()
	p := cb.probing
	cb.mu.Unlock()
	var wc [1]verbs.WC
	if p && cb.cq.Poll(wc[:]) == 1 {
		if cb.isProbe(&wc[0]) {
			return cb.getState() == stError
		}
		cb.held = append(cb.held, wc[0])
	}
	return false
}

// isProbe handles wc if it is the probe's completion.
func (cb *rcb) isProbe(wc *verbs.WC) bool {
	if wc.WRID != probeWRID {
		return false
	}
	cb.probeDone(wc)
	return true
}

// lostOp reports a test work request that exhausted the transport's
// retries: the peer is gone.
func (cb *rcb) lostOp(wc *verbs.WC) {
	cb.errf("%sconnection lost: the peer stopped answering (a work request got no ACK after the transport's retries: status %d, %v)\n",
		cb.whoPrefix(), int(wc.Status), wc.Status)
	cb.setCQErr()
	cb.setState(stError)
	cb.post()
}
