package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// wireLog is a pipe filter that records the RC packets an end sends and
// drops those drop says to (called with the parsed packet and how many
// earlier packets of the same transport had the same PSN).
type wireLog struct {
	mu   sync.Mutex
	pkts []wire.Packet
	seen map[[2]uint32]int
	drop func(p *wire.Packet, copyNo int) bool
}

func (l *wireLog) filter(lp *link.Packet) pipe.Verdict {
	var p wire.Packet
	if p.Parse(lp.Buf[:lp.N]) != nil {
		return pipe.Pass
	}
	p.Payload = nil
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[[2]uint32]int{}
	}
	k := [2]uint32{uint32(p.BTH.Opcode) & 0xe0, p.BTH.PSN} // transport and PSN: a replay's opcode may differ
	n := l.seen[k]
	l.seen[k] = n + 1
	l.pkts = append(l.pkts, p)
	if l.drop != nil && l.drop(&p, n) {
		return pipe.Drop
	}
	return pipe.Pass
}

func (l *wireLog) list() []wire.Packet {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wire.Packet(nil), l.pkts...)
}

// isReadResp reports a READ response opcode.
func isReadResp(o wire.Opcode) bool {
	return o >= wire.RCReadResponseFirst && o <= wire.RCReadResponseOnly
}

// TestReadGapReRequest: READ responses that arrive after a lost one are
// kept, and the requester asks at once (no timer: the fake clock never
// moves) for exactly the missing response: a READ request with its PSN,
// VA and one PMTU of length, which the responder answers with that one
// response (MIDDLE..LAST of the range, as rxe replays). Nothing else is
// sent again and the data is whole.
func TestReadGapReRequest(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool { return p.BTH.PSN == 105 && n == 0 }}
	req := &wireLog{}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 3)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
	var reqs []wire.Packet
	for _, p := range req.list() {
		if p.BTH.Opcode == wire.RCReadRequest {
			reqs = append(reqs, p)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d READ requests, want the READ and one re-request: %+v", len(reqs), reqs)
	}
	rr := reqs[1]
	if rr.BTH.PSN != 105 || rr.RETH.VA != b.mr.Addr()+5*1024 || rr.RETH.Length != 1024 || rr.RETH.RKey != b.mr.RKey() {
		t.Fatalf("re-request PSN %d VA %#x length %d, want PSN 105 VA %#x length 1024",
			rr.BTH.PSN, rr.RETH.VA, rr.RETH.Length, b.mr.Addr()+5*1024)
	}
	var resps []wire.Packet
	for _, p := range resp.list() {
		if isReadResp(p.BTH.Opcode) {
			resps = append(resps, p)
		}
	}
	if len(resps) != 17 || resps[16].BTH.PSN != 105 || resps[16].BTH.Opcode != wire.RCReadResponseLast {
		t.Fatalf("%d responses (want 16 and the one missing, as a LAST): last %+v", len(resps), resps[len(resps)-1].BTH)
	}
	if n := a.dev.Stats().RetryTimeouts.Load(); n != 0 {
		t.Fatalf("%d retransmit timeouts", n)
	}
}

// TestReadFirstResponseLate: the first response of a READ is missing and
// the others land. On a path that reorders it is usually only late, and a
// request at the READ's first PSN must ask for all of it: the requester
// asks nothing at once (the fake clock stands still), takes the late
// response when it comes, and the READ completes with nothing sent again.
func TestReadFirstResponseLate(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	var late sync.Mutex
	var held []byte
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool { return p.BTH.PSN == 100 && n == 0 }}
	req := &wireLog{}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: func(lp *link.Packet) pipe.Verdict {
		v := resp.filter(lp)
		if v == pipe.Drop {
			late.Lock()
			held = append([]byte(nil), lp.Buf[:lp.N]...)
			late.Unlock()
		}
		return v
	}, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 9)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, p := range resp.list() {
			if isReadResp(p.BTH.Opcode) {
				n++
			}
		}
		late.Lock()
		ok := n == 16 && held != nil
		late.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d responses sent", n)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the requester take them
	if n := len(req.list()); n != 1 {
		t.Fatalf("%d packets from the requester, want the READ alone while the first response is late: %+v", n, req.list())
	}
	if n := a.scq.Len(); n != 0 {
		t.Fatalf("%d completions without the first response", n)
	}
	late.Lock()
	pkt := held
	late.Unlock()
	b.dev.write([]link.Packet{{Buf: pkt, N: len(pkt), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
	if n := len(req.list()); n != 1 {
		t.Fatalf("%d packets from the requester, want the READ alone", n)
	}
	if n := a.dev.Stats().ReadReRequests.Load(); n != 0 {
		t.Fatalf("%d re-requests", n)
	}
}

// TestReadFirstResponseLost: the first response of a READ is lost; after a
// round trip (firstWindow) the requester asks for the READ again (all of it: a request at its first PSN
// is a new READ to a responder that never had it) and the READ completes.
func TestReadFirstResponseLost(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool { return p.BTH.PSN == 100 && n == 0 }}
	a, b := newPair(t, pairOpts{filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 11)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	stepUntil(clk, 2000, func() bool { return a.scq.Len() != 0 })
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
}

// TestReadTailReRequest: the last responses of a READ are lost; the next
// READ's responses show it (a responder answers in order), and the first
// READ's tail is asked for at once. Both complete in order. The second READ
// may be posted after the first's responses arrived, when the answer it
// waits for (as an ACK-clocked post) is lost: it leaves within the flush
// delay, the only time the fake clock is moved by (no probe, no retransmit
// timeout: stepFlush).
func TestReadTailReRequest(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	// The first READ is PSNs 100-107, the second 108-115.
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool { return (p.BTH.PSN == 106 || p.BTH.PSN == 107) && n == 0 }}
	req := &wireLog{}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 5)
	for i := range 2 {
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, i*8192, 8192),
			RemoteAddr: b.mr.Addr() + uint64(i*8192), RKey: b.mr.RKey()})
	}
	wcs := stepFlush(t, clk, a.scq, 2)
	for i, wc := range wcs {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
	if n, p := a.dev.Stats().RetryTimeouts.Load(), a.dev.Stats().LossProbes.Load(); n != 0 || p != 0 {
		t.Fatalf("%d retransmit timeouts, %d loss probes", n, p)
	}
	var rr []wire.Packet
	for _, p := range req.list() {
		if p.BTH.Opcode == wire.RCReadRequest && p.BTH.PSN != 100 && p.BTH.PSN != 108 {
			rr = append(rr, p)
		}
	}
	if len(rr) != 1 || rr[0].BTH.PSN != 106 || rr[0].RETH.Length != 2048 {
		t.Fatalf("re-requests %+v, want one for PSN 106, 2048 bytes", rr)
	}
}

// TestReadCompletesWhole: a READ whose responses all but one landed does
// not complete, nor does a later READ that landed whole (completions are in
// order), until the missing one arrives; a re-request that is lost in turn
// is asked again by the timer, never from below an earlier re-request's
// start (rxe drops such a duplicate).
func TestReadCompletesWhole(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	var block sync.Mutex
	blocked := true
	lost := func(psn uint32) bool { return psn == 103 || psn == 110 }
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool { return lost(p.BTH.PSN) && n == 0 }}
	req := &wireLog{drop: func(p *wire.Packet, n int) bool {
		block.Lock()
		defer block.Unlock()
		return blocked && p.BTH.Opcode == wire.RCReadRequest && lost(p.BTH.PSN)
	}}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 7)
	for i := range 2 {
		post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, i*8192, 8192),
			RemoteAddr: b.mr.Addr() + uint64(i*8192), RKey: b.mr.RKey()})
	}
	// Both READs' other responses arrive; the re-requests for 103 and 110
	// are lost. A post the ACK clock holds back leaves with the flush
	// timer, on the fake clock: it is moved as in stepFlush (the second
	// READ's request waited for it in one CI run, and no response came).
	deadline := time.Now().Add(10 * time.Second)
	var moved time.Duration
	for {
		n := 0
		for _, p := range resp.list() {
			if isReadResp(p.BTH.Opcode) {
				n++
			}
		}
		if n >= 14 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d responses sent", n)
		}
		time.Sleep(time.Millisecond)
		if moved < minProbeTimeout/4 {
			clk.Advance(pollFlushDelay)
			moved += pollFlushDelay
		}
	}
	time.Sleep(20 * time.Millisecond) // let the requester take them
	if n := a.scq.Len(); n != 0 {
		t.Fatalf("%d completions while a response of the first READ is missing", n)
	}
	block.Lock()
	blocked = false
	block.Unlock()
	for i := 0; a.scq.Len() < 2 && i < 100; i++ {
		clk.Advance(ackTimeout(14))
		time.Sleep(2 * time.Millisecond)
	}
	wcs := waitWC(t, a.scq, 2, 10*time.Second)
	for i, wc := range wcs {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
	floor := map[uint32]uint32{} // per READ (first PSN): the last request's PSN
	for _, p := range req.list() {
		if p.BTH.Opcode != wire.RCReadRequest {
			continue
		}
		first := uint32(100)
		if p.BTH.PSN >= 108 {
			first = 108
		}
		if last, ok := floor[first]; ok && p.BTH.PSN < last {
			t.Fatalf("READ at %d asked again from %d after %d", first, p.BTH.PSN, last)
		}
		// The VA goes with the PSN: rxe checks the VA against its floor.
		if va := b.mr.Addr() + uint64(first-100)*1024 + uint64(p.BTH.PSN-first)*1024; p.RETH.VA != va {
			t.Fatalf("request PSN %d VA %#x, want %#x", p.BTH.PSN, p.RETH.VA, va)
		}
		floor[first] = p.BTH.PSN
	}
}

// TestReadSubRangeReplay: softroce's responder answers a duplicate READ for
// part of an earlier READ with exactly that part, as rxe does: MIDDLE
// responses and a LAST at the range's end (FIRST at the READ's first PSN),
// and leaves the READ's record alone.
func TestReadSubRangeReplay(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	resp := &wireLog{}
	a, b := newPair(t, pairOpts{filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:8192], 1)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 8192),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitWC(t, a.scq, 1, 10*time.Second)
	send := func(psn uint32, off, n int) {
		var h wire.Packet
		h.BTH = wire.BTH{Opcode: wire.RCReadRequest, DestQP: b.qp.QPN(), PSN: psn, PKey: wire.DefaultPKey, AckReq: true}
		h.RETH = wire.RETH{VA: b.mr.Addr() + uint64(off), RKey: b.mr.RKey(), Length: uint32(n)}
		buf := h.Append(nil)
		a.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: b.dev.LocalAddr(), Src: a.dev.LocalAddr()}})
	}
	wait := func(n int) []wire.Packet {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var out []wire.Packet
			for _, p := range resp.list() {
				if isReadResp(p.BTH.Opcode) {
					out = append(out, p)
				}
			}
			if len(out) >= n || time.Now().After(deadline) {
				time.Sleep(5 * time.Millisecond)
				return resp.list()
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	send(102, 2048, 3072) // responses 2..4 of 0..7
	got := wait(11)
	var ops []wire.Opcode
	var psns []uint32
	for _, p := range got[8:] {
		if isReadResp(p.BTH.Opcode) {
			ops = append(ops, p.BTH.Opcode)
			psns = append(psns, p.BTH.PSN)
		}
	}
	want := []wire.Opcode{wire.RCReadResponseMiddle, wire.RCReadResponseMiddle, wire.RCReadResponseLast}
	if len(ops) != 3 || ops[0] != want[0] || ops[1] != want[1] || ops[2] != want[2] || psns[0] != 102 || psns[2] != 104 {
		t.Fatalf("replay of PSNs 102-104: %v at %v, want %v at 102-104", ops, psns, want)
	}
	send(100, 0, 1024) // the first response alone: ONLY
	got = wait(12)
	if p := got[len(got)-1]; p.BTH.Opcode != wire.RCReadResponseOnly || p.BTH.PSN != 100 {
		t.Fatalf("replay of PSN 100 alone: %v at %d", p.BTH.Opcode, p.BTH.PSN)
	}
}

// TestReadWholeReAskOnce: a READ whose first response is lost is not
// asked for again at once (on a path that reorders the first response is
// usually late: TestReadFirstResponseLate); after a round trip
// (firstWindow) it is asked for whole (its request may have been lost). The responses of that replay
// that land for the first time (here 105-110, lost the first time) do not
// each ask for the whole READ once more while the first response is still
// missing (lost again): one whole re-request, not one per response.
func TestReadWholeReAskOnce(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	resp := &wireLog{drop: func(p *wire.Packet, n int) bool {
		return p.BTH.PSN == 100 && n < 2 || p.BTH.PSN >= 105 && p.BTH.PSN <= 110 && n == 0
	}}
	req := &wireLog{}
	a, b := newPair(t, pairOpts{filterA: req.filter, filterB: resp.filter, clock: clk, timeout: 14})
	fill(b.buf[:16<<10], 4)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	count := func() (reqs, resps int) {
		for _, p := range req.list() {
			if p.BTH.Opcode == wire.RCReadRequest {
				reqs++
			}
		}
		for _, p := range resp.list() {
			if isReadResp(p.BTH.Opcode) {
				resps++
			}
		}
		return
	}
	waitResps := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
			if _, k := count(); k >= n || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitResps(16)
	if reqs, resps := count(); reqs != 1 {
		t.Fatalf("%d READ requests (%d responses) before any timer: want the READ alone", reqs, resps)
	}
	stepUntil(clk, 200, func() bool { reqs, _ := count(); return reqs > 1 })
	waitResps(32)
	if reqs, resps := count(); reqs != 2 {
		t.Fatalf("%d READ requests (%d responses) after the probe's replay: want the READ and one whole re-request", reqs, resps)
	}
	for i := 0; a.scq.Len() == 0 && i < 200; i++ {
		clk.Advance(5 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
}

// TestSelectiveRequesterUnpaced: a duplicate READ for the rest of a READ
// already sent paces the responder (resp_pace.go: a requester that drops
// what follows a gap), unless it came within crossQuiet of the burst that
// sent those responses after a quiet (it crossed them: readCrossed); one
// for part of a READ shows a requester that keeps it, and ends the pacing.
func TestSelectiveRequesterUnpaced(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	a, b := newPair(t, pairOpts{clock: clk, timeout: 14})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 8192),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitWC(t, a.scq, 1, 10*time.Second)
	send := func(psn uint32, off, n int) {
		var h wire.Packet
		h.BTH = wire.BTH{Opcode: wire.RCReadRequest, DestQP: b.qp.QPN(), PSN: psn, PKey: wire.DefaultPKey, AckReq: true}
		h.RETH = wire.RETH{VA: b.mr.Addr() + uint64(off), RKey: b.mr.RKey(), Length: uint32(n)}
		buf := h.Append(nil)
		n0 := b.dev.Stats().DupRequests.Load()
		a.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: b.dev.LocalAddr(), Src: a.dev.LocalAddr()}})
		for deadline := time.Now().Add(10 * time.Second); b.dev.Stats().DupRequests.Load() == n0; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatal("the duplicate READ was not taken")
			}
		}
	}
	paced := func() bool {
		b.qp.mu.Lock()
		defer b.qp.mu.Unlock()
		return b.qp.resp.pace != nil && b.qp.resp.pace.burst > 0
	}
	// At once: the requester asked before it could have had the
	// responses, which a burst after a quiet (the QP's first) sent.
	send(102, 2048, 6144)
	if paced() || b.dev.Stats().ReadDupCrossed.Load() != 1 {
		t.Fatalf("a duplicate READ that crossed its responses: paced %v, %d crossed", paced(), b.dev.Stats().ReadDupCrossed.Load())
	}
	clk.Advance(crossQuiet)
	send(102, 2048, 6144) // the rest, later: a loss to the pacer
	if !paced() {
		t.Fatal("a duplicate READ for the rest of a READ did not pace the responder")
	}
	// Paced, a burst after a quiet is the pacer's own: a new READ, sent
	// after 10 ms without a response, and a duplicate for its rest at once
	// (past the cut guard) is a loss again.
	clk.Advance(10 * time.Millisecond)
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 8192, 8192),
		RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	waitWC(t, a.scq, 1, 10*time.Second)
	cuts := b.dev.Stats().ReadPaceCuts.Load()
	send(109, 8192+1024, 7168)
	if n := b.dev.Stats().ReadPaceCuts.Load(); n != cuts+1 {
		t.Fatalf("paced, a duplicate READ at once after a burst: %d cuts, want %d", n, cuts+1)
	}
	send(110, 8192+2048, 1024) // a part
	if paced() {
		t.Fatal("still paced after a duplicate READ for part of a READ")
	}
}

// stepUntil moves clk a millisecond at a time, a real millisecond apart,
// until done or after steps steps.
func stepUntil(clk *clocktest.Fake, steps int, done func() bool) {
	for i := 0; !done() && i < steps; i++ {
		clk.Advance(time.Millisecond)
		time.Sleep(time.Millisecond)
	}
}

// stepFlush waits (10 s at most) for n completions on cq, moving clk by
// pollFlushDelay each millisecond, for at most a quarter of the least loss
// probe wait: the flush timer fires, no probe or retransmit timer does.
func stepFlush(t *testing.T, clk *clocktest.Fake, cq *CQ, n int) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, n)
	deadline := time.Now().Add(10 * time.Second)
	var moved time.Duration
	for len(out) < n {
		k := cq.Poll(buf[:n-len(out)])
		out = append(out, buf[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d completions: %+v", len(out), n, out)
		}
		time.Sleep(time.Millisecond)
		if moved < minProbeTimeout/4 {
			clk.Advance(pollFlushDelay)
			moved += pollFlushDelay
		}
	}
	return out
}

// pendingEP is a link whose Pending the test decides (link.Pender).
type pendingEP struct {
	link.Endpoint
	pending func() bool
}

func (e pendingEP) Pending() bool { return e.pending() }

// TestReadProbeAfterStall: a READ's 16 responses wait unread at the
// requester when its loss probe comes due (16.8 ms into the silence, at
// timeout 14). Either its process stalled (the fake clock jumps 40 ms and
// the timer fires late: stall) or its receive path has not run (the timer
// is on time, and the link says datagrams wait: unread). It holds the
// probe back, for probeSettle at a time, instead of asking again for what
// came: the responses are taken, the READ completes, and the responder,
// which paces READs it is asked for again (resp_pace.go), sees no
// duplicate. When nothing came (lost), or the link says datagrams wait
// but the receive path never takes them (never read: a silence holds its
// probe a quarter of its wait at most), the probe goes out, well before the
// retransmit timeout, and the READ completes.
func TestReadProbeAfterStall(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stall, unread bool // how the silence is this host's own
		taken         bool // the responses are read
	}{
		{"stall", true, false, true},
		{"unread", false, true, true},
		{"lost", true, false, false},
		{"never read", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.NewFake(time.Unix(0, 0))
			var mu sync.Mutex
			var held [][]byte
			delivered := false
			resp, req := &wireLog{}, &wireLog{}
			o := pairOpts{filterA: req.filter, filterB: func(lp *link.Packet) pipe.Verdict {
				v := resp.filter(lp)
				var p wire.Packet
				if p.Parse(lp.Buf[:lp.N]) == nil && isReadResp(p.BTH.Opcode) {
					mu.Lock()
					defer mu.Unlock()
					if len(held) < 16 { // the first copies wait (or are lost)
						held = append(held, append([]byte(nil), lp.Buf[:lp.N]...))
						return pipe.Drop
					}
				}
				return v
			}, clock: clk, timeout: 14}
			ea, eb := newPipePair(t, &o)
			a, b := newPairOn(t, pendingEP{ea, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return tc.unread && len(held) == 16 && !delivered
			}}, eb, o)
			fill(b.buf[:16<<10], 3)
			post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 16<<10),
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			until := func(what string, f func() bool) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("waited 10 s for %s", what)
					}
				}
			}
			until("the 16 responses", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 16 })
			st := a.dev.Stats()
			if tc.stall {
				clk.Stall(40 * time.Millisecond) // the probe was due at 16.8 ms
				clk.Advance(0)
			} else {
				clk.Advance(17 * time.Millisecond)
			}
			until("the probe timer", func() bool { return st.ProbesDeferred.Load()+st.LossProbes.Load() != 0 })
			if p := st.LossProbes.Load(); p != 0 {
				t.Fatalf("a probe when the timer fired (%d probes deferred)", st.ProbesDeferred.Load())
			}
			if tc.taken {
				mu.Lock()
				pkts := held
				delivered = true
				mu.Unlock()
				for _, pkt := range pkts { // through filterB again, which passes them now
					b.dev.write([]link.Packet{{Buf: pkt, N: len(pkt), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
				}
				until("the READ's completion", func() bool { return a.scq.Len() == 1 })
				clk.Advance(2 * probeSettle)
			} else {
				stepUntil(clk, 40, func() bool { return st.LossProbes.Load() != 0 }) // a wait (16.8 ms) and a little
				until("the probe", func() bool { return st.LossProbes.Load() == 1 })
				stepUntil(clk, 100, func() bool { return a.scq.Len() != 0 })
			}
			if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
				t.Fatalf("%+v", wc[0])
			}
			mustEqual(t, a.buf[:16<<10], b.buf[:16<<10])
			wantDeferred := func(d uint64) bool { return d == 1 }
			if tc.unread && !tc.taken {
				wantDeferred = func(d uint64) bool { return d >= 3 && d <= 6 } // every ms for a quarter of the wait
			}
			if n, p, d := st.RetryTimeouts.Load(), st.LossProbes.Load(), st.ProbesDeferred.Load(); n != 0 || p != map[bool]uint64{true: 0, false: 1}[tc.taken] || !wantDeferred(d) {
				t.Errorf("%d retransmit timeouts, %d loss probes, %d probes deferred", n, p, d)
			}
			reads := 0
			for _, p := range req.list() {
				if p.BTH.Opcode == wire.RCReadRequest {
					reads++
				}
			}
			if want := map[bool]int{true: 1, false: 2}[tc.taken]; reads != want {
				t.Errorf("%d READ requests, want %d", reads, want)
			}
			if n := b.dev.Stats().DupRequests.Load(); tc.taken && n != 0 {
				t.Errorf("the responder saw %d duplicates", n)
			}
		})
	}
}
