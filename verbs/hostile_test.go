package verbs

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// forged is a response a third party injects with the peer's address.
type forged struct {
	name string
	op   wire.Opcode
	syn  uint8
}

var forgedKinds = []forged{
	{"ACK", wire.RCAcknowledge, wire.SyndromeACK},
	{"NAK-seq", wire.RCAcknowledge, wire.SyndromeNAKSeq},
	{"NAK-invreq", wire.RCAcknowledge, wire.SyndromeNAKInvReq},
	{"NAK-remacc", wire.RCAcknowledge, wire.SyndromeNAKRemAcc},
	{"NAK-remop", wire.RCAcknowledge, wire.SyndromeNAKRemOp},
	{"RNR-NAK", wire.RCAcknowledge, wire.AETHTypeRNR | 1},
	{"read-resp-only", wire.RCReadResponseOnly, wire.SyndromeACK},
	{"read-resp-first", wire.RCReadResponseFirst, wire.SyndromeACK},
	{"atomic-ack", wire.RCAtomicAcknowledge, wire.SyndromeACK},
}

// inject sends a forged response to a's QP from b's address (b's link),
// the way an on-path or spoofing attacker would.
func inject(t *testing.T, a, b *side, f forged, psn uint32) {
	t.Helper()
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: f.op, DestQP: a.qp.QPN(), PSN: psn & wire.PSNMask, PKey: wire.DefaultPKey}
	h.AETH = wire.AETH{Syndrome: f.syn, MSN: 1}
	if f.op == wire.RCAtomicAcknowledge {
		h.AtomicAckETH.Orig = 0xdeadbeef
	}
	var payload []byte
	if f.op == wire.RCReadResponseFirst {
		payload = make([]byte, 1024)
	}
	h.Payload = payload
	buf := h.Append(nil)
	b.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
}

// drops is what a's completer has dropped so far.
func drops(s *side) uint64 {
	st := s.dev.Stats()
	return st.DropResponse.Load() + st.DropBadResponse.Load()
}

// TestForgedResponses: responses that answer nothing outstanding, or lie
// outside what was sent, or do not fit the WQE their PSN names, are
// dropped and counted; the QP stays in RTS, no completion appears, and the
// real transfer then finishes with the right data (rxe_comp.c check_psn /
// check_ack). A forged ACK beyond the last PSN sent must not complete (or
// skip) packets never sent.
func TestForgedResponses(t *testing.T) {
	const far = 1 << 22
	type pos struct {
		name string
		psn  func(first, sent uint32) uint32
	}
	// first: the oldest outstanding PSN (or the next one when nothing is
	// outstanding); sent: one past the newest PSN sent.
	below := []pos{
		{"below", func(f, s uint32) uint32 { return wire.PSNAdd(f, -3) }},
		{"far-behind", func(f, s uint32) uint32 { return wire.PSNAdd(f, -far) }},
	}
	beyond := []pos{
		{"beyond", func(f, s uint32) uint32 { return s }},
		{"beyond+5", func(f, s uint32) uint32 { return wire.PSNAdd(s, 5) }},
		{"far-ahead", func(f, s uint32) uint32 { return wire.PSNAdd(f, far) }},
	}
	for _, outstanding := range []bool{false, true} {
		t.Run(fmt.Sprintf("outstanding=%v", outstanding), func(t *testing.T) {
			clk := clocktest.NewFake(time.Unix(0, 0))
			var block atomic.Bool
			filter := func(p *link.Packet) pipe.Verdict {
				if block.Load() {
					return pipe.Drop
				}
				return pipe.Pass
			}
			a, b := newPair(t, pairOpts{filterA: filter, clock: clk, timeout: 14})
			// One completed WRITE first: PSN 100 is acknowledged.
			fill(a.buf[:1000], 1)
			post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 1000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
				t.Fatalf("%+v", wc[0])
			}
			positions := append(append([]pos{}, below...), beyond...)
			first := uint32(101)
			const big = (maxUnackedPSNs + 72) << 10 // the first maxUnackedPSNs packets fill the window
			if outstanding {
				// A WRITE whose packets are lost: 101..100+maxUnackedPSNs
				// are sent, the last 72 not yet (window).
				block.Store(true)
				fill(a.buf[:big], 2)
				post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, big), RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
			} else {
				// Nothing outstanding: also the last PSN acknowledged.
				positions = append(positions, pos{"last-acked", func(f, s uint32) uint32 { return wire.PSNAdd(f, -1) }})
			}
			a.qp.mu.Lock()
			sent := a.qp.req.sentPSN
			a.qp.mu.Unlock()
			if outstanding && sent != first+maxUnackedPSNs {
				t.Fatalf("sent up to %d, want %d", sent, first+maxUnackedPSNs)
			}
			for _, f := range forgedKinds {
				for _, p := range positions {
					n := drops(a)
					inject(t, a, b, f, p.psn(first, sent))
					deadline := time.Now().Add(5 * time.Second)
					for drops(a) == n && time.Now().Before(deadline) {
						time.Sleep(100 * time.Microsecond)
					}
					if drops(a) != n+1 {
						t.Errorf("%s at %s (PSN %d): drop counters moved by %d, want 1", f.name, p.name, p.psn(first, sent)&wire.PSNMask, drops(a)-n)
					}
					if st := a.qp.State(); st != QPStateRTS {
						t.Fatalf("%s at %s: QP in %v", f.name, p.name, st)
					}
					if a.scq.Len() != 0 {
						t.Fatalf("%s at %s: completion %+v", f.name, p.name, waitWC(t, a.scq, 1, time.Second))
					}
				}
			}
			if !outstanding {
				return
			}
			// The WQE completes normally once the link works again, with
			// every byte in place.
			block.Store(false)
			for i := 0; a.scq.Len() == 0 && i < 1000; i++ {
				clk.Advance(10 * time.Millisecond)
				time.Sleep(time.Millisecond)
			}
			if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess || wc[0].WRID != 2 {
				t.Fatalf("%+v", wc[0])
			}
			mustEqual(t, b.buf[4096:4096+big], a.buf[:big])
			if st := a.qp.State(); st != QPStateRTS {
				t.Fatalf("QP in %v", st)
			}
		})
	}
}

// TestForgedResponseWrongKind: a response whose PSN names an outstanding
// WQE but whose kind does not fit it is dropped: a read response or
// atomic ACK for a WRITE, an atomic ACK for a READ, an RNR NAK for a READ,
// a sequence NAK inside a READ (a responder only ever expects a request's
// first PSN), a read response carrying a NAK AETH.
func TestForgedResponseWrongKind(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	var block atomic.Bool
	block.Store(true)
	filter := func(p *link.Packet) pipe.Verdict {
		if block.Load() {
			return pipe.Drop
		}
		return pipe.Pass
	}
	a, b := newPair(t, pairOpts{filterA: filter, clock: clk, timeout: 14})
	fill(a.buf[:3000], 5)
	fill(b.buf[8192:8192+3000], 6)
	// WRITE 100..102, READ 103..105.
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 3000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 4096, 3000), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	cases := []struct {
		f   forged
		psn uint32
	}{
		{forgedKinds[6], 100}, {forgedKinds[6], 101}, {forgedKinds[7], 100}, {forgedKinds[8], 100}, {forgedKinds[8], 102},
		{forgedKinds[8], 103}, {forgedKinds[5], 103}, {forgedKinds[1], 104},
		// A read response whose AETH is a NAK, at the READ's expected PSN
		// (checkResponseKind: the data must not be placed).
		{forged{"read-resp-first-NAK", wire.RCReadResponseFirst, wire.SyndromeNAKRemAcc}, 103},
	}
	for _, c := range cases {
		n := drops(a)
		inject(t, a, b, c.f, c.psn)
		deadline := time.Now().Add(5 * time.Second)
		for drops(a) == n && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if drops(a) != n+1 {
			t.Errorf("%s at %d: drop counters moved by %d, want 1", c.f.name, c.psn, drops(a)-n)
		}
		if st := a.qp.State(); st != QPStateRTS {
			t.Fatalf("%s at %d: QP in %v", c.f.name, c.psn, st)
		}
		if a.scq.Len() != 0 {
			t.Fatalf("%s at %d: completion %+v", c.f.name, c.psn, waitWC(t, a.scq, 1, time.Second))
		}
	}
	block.Store(false)
	for i := 0; a.scq.Len() < 2 && i < 1000; i++ {
		clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	for _, wc := range waitWC(t, a.scq, 2, 10*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	mustEqual(t, b.buf[:3000], a.buf[:3000])
	mustEqual(t, a.buf[4096:4096+3000], b.buf[8192:8192+3000])
}

// TestSendWithInvOrdinaryMR: SEND_WITH_INVALIDATE naming an ordinary MR
// (not a fast-registration MR, which softroce does not have) is refused as
// rxe refuses it: the requester gets its ACK, the receive completes with
// REM_INV_REQ_ERR, the responder QP goes to ERR, the refusal is counted,
// and the MR keeps working.
func TestSendWithInvOrdinaryMR(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	postRecv(t, b, 3, 0, 100)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRSendWithInv, ImmData: b.mr.RKey(), Flags: SendSignaled, SGList: sge(a, 0, 10)})
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("requester %+v", wc[0])
	}
	if wc := waitWC(t, b.rcq, 1, 10*time.Second); wc[0].Status != WCRemInvReqErr || wc[0].WRID != 3 {
		t.Fatalf("responder %+v", wc[0])
	}
	waitState(t, b.qp, QPStateErr)
	if !b.mr.Valid() {
		t.Fatal("an ordinary MR was invalidated remotely")
	}
	if n := b.dev.Stats().BadInvalidates.Load(); n != 1 {
		t.Fatalf("BadInvalidates %d, want 1", n)
	}
}

// TestSendWithInvOtherQPsWindow: a type 2 window may only be invalidated
// by a SEND_WITH_INVALIDATE arriving on the QP it is bound to.
func TestSendWithInvOtherQPsWindow(t *testing.T) {
	a, b, mr := mwPair(t)
	other, err := b.pd.CreateQP(&QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	mw, _ := b.pd.AllocMW(MWType2)
	key := bind2(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	other.mu.Lock()
	ok := other.remoteInvalidate(key)
	other.mu.Unlock()
	if ok || !mw.Bound() {
		t.Fatal("a window bound to one QP was invalidated by a SEND_WITH_INV on another")
	}
	b.qp.mu.Lock()
	ok = b.qp.remoteInvalidate(key)
	b.qp.mu.Unlock()
	if !ok || mw.Bound() {
		t.Fatal("the window's own QP could not invalidate it")
	}
	_ = a
}

// injectReq sends a forged request to b's QP from a's address.
func injectReq(a, b *side, h *wire.Packet) {
	h.BTH.DestQP, h.BTH.PKey = b.qp.QPN(), wire.DefaultPKey
	buf := h.Append(nil)
	a.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: b.dev.LocalAddr(), Src: a.dev.LocalAddr()}})
}

// TestReadAmplificationBounded: a READ request reaching past the MR is
// NAKed with no response carrying bytes, and a flood of READ requests
// (far more than max_dest_rd_atomic) is answered within the responder's
// fixed resources: no queue or memory grows with the flood.
func TestReadAmplificationBounded(t *testing.T) {
	a, b := newPair(t, pairOpts{bufSize: 64 << 10})
	// Beyond the MR: NAK remote access error, nothing else.
	tx := b.dev.Stats().TxPackets.Load()
	var h wire.Packet
	h.BTH = wire.BTH{Opcode: wire.RCReadRequest, PSN: 100, AckReq: true}
	h.RETH = wire.RETH{VA: b.mr.Addr() + uint64(b.mr.Len()) - 100, RKey: b.mr.RKey(), Length: 1 << 20}
	injectReq(a, b, &h)
	waitState(t, b.qp, QPStateErr)
	if n := b.dev.Stats().NAKsSent.Load(); n != 1 {
		t.Fatalf("NAKs sent %d, want 1", n)
	}
	// The QP is in ERR once the NAK is built; it is counted once written,
	// at the end of the received batch.
	for deadline := time.Now().Add(2 * time.Second); b.dev.Stats().TxPackets.Load() == tx && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // and nothing after it
	if n := b.dev.Stats().TxPackets.Load() - tx; n != 1 {
		t.Fatalf("responder sent %d packets for a READ beyond its MR, want 1 (the NAK)", n)
	}

	// A flood: 2000 READs of 4 KiB, 16 resources.
	a, b = newPair(t, pairOpts{bufSize: 64 << 10})
	const flood, size = 2000, 4096
	tx = b.dev.Stats().TxPackets.Load()
	psn := uint32(100)
	rx := b.dev.Stats().RxPackets.Load()
	for i := 0; i < flood; i++ {
		h = wire.Packet{}
		h.BTH = wire.BTH{Opcode: wire.RCReadRequest, PSN: psn, AckReq: true}
		h.RETH = wire.RETH{VA: b.mr.Addr(), RKey: b.mr.RKey(), Length: size}
		injectReq(a, b, &h)
		psn += size / 1024
		if i%100 == 99 { // let the pipe's queue drain
			deadline := time.Now().Add(20 * time.Second)
			for b.dev.Stats().RxPackets.Load()-rx < uint64(i+1) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	if n := b.dev.Stats().RxPackets.Load() - rx; n != flood {
		t.Fatalf("responder received %d of %d READ requests", n, flood)
	}
	b.qp.mu.Lock()
	res := len(b.qp.resp.res)
	b.qp.mu.Unlock()
	if res != 16 {
		t.Fatalf("%d responder resources after the flood, want max_dest_rd_atomic 16", res)
	}
	if b.qp.State() != QPStateRTS {
		t.Fatalf("responder QP in %v", b.qp.State())
	}
	// Each READ is answered once, as it arrives (no backlog kept).
	if sent := b.dev.Stats().TxPackets.Load() - tx; sent > flood*size/1024 {
		t.Fatalf("responder sent %d packets for %d READs of %d packets", sent, flood, size/1024)
	}
}

// TestReadMiddleAfterDroppedNAK: READ_RESPONSE_MIDDLE carries no AETH; a
// NAK parsed just before it (here a forged one, dropped) must not make the
// completer take the middle response for a NAK-carrying one and drop it.
func TestReadMiddleAfterDroppedNAK(t *testing.T) {
	clk := clocktest.NewFake(time.Unix(0, 0))
	drop := func(p *link.Packet) pipe.Verdict { return pipe.Drop }
	a, b := newPair(t, pairOpts{filterA: drop, clock: clk, timeout: 14})
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 0, 3072), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	send := func(op wire.Opcode, psn uint32, syn uint8, fillByte byte) {
		h := wire.Packet{}
		h.BTH = wire.BTH{Opcode: op, DestQP: a.qp.QPN(), PSN: psn, PKey: wire.DefaultPKey}
		h.AETH = wire.AETH{Syndrome: syn}
		if op != wire.RCAcknowledge {
			h.Payload = bytes.Repeat([]byte{fillByte}, 1024)
		}
		buf := h.Append(nil)
		b.dev.write([]link.Packet{{Buf: buf, N: len(buf), Dst: a.dev.LocalAddr(), Src: b.dev.LocalAddr()}})
	}
	send(wire.RCReadResponseFirst, 100, wire.SyndromeACK, 1)
	send(wire.RCAcknowledge, 100+1<<22, wire.SyndromeNAKRemAcc, 0) // dropped: never sent
	send(wire.RCReadResponseMiddle, 101, 0, 2)
	send(wire.RCReadResponseLast, 102, wire.SyndromeACK, 3)
	if wc := waitWC(t, a.scq, 1, 10*time.Second); wc[0].Status != WCSuccess {
		t.Fatalf("%+v", wc[0])
	}
	if a.buf[0] != 1 || a.buf[1024] != 2 || a.buf[2048] != 3 {
		t.Fatalf("read data %d %d %d", a.buf[0], a.buf[1024], a.buf[2048])
	}
}
