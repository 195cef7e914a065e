package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
)

// recoverCase posts one 16-packet RDMA WRITE (PSNs 100-115) from a to b
// over a pipe whose requester side drops what dropReq says and responder
// side what dropResp says (each called with the packet and how many
// earlier copies of its PSN went by), at timeout code 14 (67 ms), inside a
// synctest bubble. It returns the clock time to the completion and a's
// counters.
func recoverCase(t *testing.T, dropReq, dropResp func(p *wire.Packet, n int) bool) (time.Duration, *Stats) {
	t.Helper()
	req, resp := &wireLog{drop: dropReq}, &wireLog{drop: dropResp}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: resp.filter, timeout: 14})
	fill(a.buf[:16<<10], 9)
	start := time.Now()
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	el := time.Since(start)
	mustEqual(t, b.buf[:16<<10], a.buf[:16<<10])
	return el, a.dev.Stats()
}

// TestLossProbeTail: the WRITE's last packet is lost, so nothing draws a
// NAK; the loss probe (the oldest unacknowledged packet again, asking for
// an ACK) finds the responder short of it and the requester goes back to
// it, well before the 67 ms retransmit timeout, spending no retry.
func TestLossProbeTail(t *testing.T) {
	runBubble(t, "tail", func(t *testing.T) {
		el, st := recoverCase(t, func(p *wire.Packet, n int) bool { return p.BTH.PSN == 115 && n == 0 }, nil)
		if st.RetryTimeouts.Load() != 0 || st.LossProbes.Load() == 0 || el >= ackTimeout(14) {
			t.Fatalf("completed after %v with %d timeouts, %d probes", el, st.RetryTimeouts.Load(), st.LossProbes.Load())
		}
	})
}

// TestLossProbeLostNAK: a packet is lost and so is the one NAK the
// responder sends for the gap (it drops the rest silently). The probe's
// answer shows where the responder stands; the requester goes back there.
func TestLossProbeLostNAK(t *testing.T) {
	runBubble(t, "nak", func(t *testing.T) {
		el, st := recoverCase(t,
			func(p *wire.Packet, n int) bool { return p.BTH.PSN == 105 && n == 0 },
			func(p *wire.Packet, n int) bool {
				return p.AETH.Value() == wire.NAKPSNSeqError && p.BTH.Opcode == wire.RCAcknowledge
			})
		if st.RetryTimeouts.Load() != 0 || st.ProbeRewinds.Load() == 0 || el >= ackTimeout(14) {
			t.Fatalf("completed after %v with %d timeouts, %d probe rewinds", el, st.RetryTimeouts.Load(), st.ProbeRewinds.Load())
		}
	})
}

// TestNAKDuringRetry: a packet is lost (NAK, retry from it), and then a
// later packet of the retransmission too: the responder NAKs that one
// during the retry sequence. rxe ignores such a NAK until the retry ends
// and waits for its retransmit timer; softroce goes back to it once the
// reordering window has passed with no answer past it.
func TestNAKDuringRetry(t *testing.T) {
	runBubble(t, "retry", func(t *testing.T) {
		el, st := recoverCase(t, func(p *wire.Packet, n int) bool {
			return p.BTH.PSN == 103 && n == 0 || p.BTH.PSN == 108 && n == 1
		}, nil)
		if st.RetryTimeouts.Load() != 0 || st.ReorderRewinds.Load() == 0 || el >= ackTimeout(14) {
			t.Fatalf("completed after %v with %d timeouts, %d rewinds after the reordering window",
				el, st.RetryTimeouts.Load(), st.ReorderRewinds.Load())
		}
	})
}

// TestProbesKeepRetryBudget: a peer that answers nothing gets loss
// probes, which spend no retry_cnt, and the QP still fails with
// RETRY_EXC_ERR within RetryBudget, not sooner than retry_cnt
// retransmit timeouts.
func TestProbesKeepRetryBudget(t *testing.T) {
	runBubble(t, "dead", func(t *testing.T) {
		drop := &wireLog{drop: func(*wire.Packet, int) bool { return true }}
		a, _ := newPair(t, pairOpts{filterA: drop.filter, timeout: 14, retry: 2, exact: true, rnrRetry: 7})
		start := time.Now()
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 100)})
		wc := waitWC(t, a.scq, 1, time.Minute)
		el := time.Since(start)
		st := a.dev.Stats()
		if wc[0].Status != WCRetryExcErr || el > RetryBudget(14, 2) || st.RetryTimeouts.Load() != 3 || st.LossProbes.Load() == 0 {
			t.Fatalf("%v after %v (budget %v), %d timeouts, %d probes", wc[0].Status, el, RetryBudget(14, 2),
				st.RetryTimeouts.Load(), st.LossProbes.Load())
		}
	})
}
