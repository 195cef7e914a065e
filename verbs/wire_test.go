package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// rawPeer drives a device's RC QP with hand-made packets from the other
// end of a pipe and reads its answers: wire-level checks of docs/protocol.md §5.
type rawPeer struct {
	t   *testing.T
	ep  link.Endpoint
	s   *side
	got chan wire.Packet
}

const rawQPN = 0x20

func newRawPeer(t *testing.T) *rawPeer { return newRawPeerWith(t, pairOpts{}) }

// newRawPeerWith is newRawPeer with the side's options (defaults filled in).
func newRawPeerWith(t *testing.T, o pairOpts) *rawPeer {
	defaults(&o)
	ea, eb := newPipePair(t, &o)
	s := newSide(t, eb, o)
	peer := &side{qp: &QP{qpn: rawQPN}, dev: &Device{gids: makeGIDs(ea.LocalAddr().Addr(), [6]byte{})}, port: ea.LocalAddr().Port()}
	connect(t, s, peer, o) // RQ PSN 100
	r := &rawPeer{t: t, ep: ea, s: s, got: make(chan wire.Packet, 64)}
	go func() {
		pk := make([]link.Packet, 8)
		for i := range pk {
			pk[i].Buf = make([]byte, maxDatagram)
		}
		for {
			n, err := ea.ReadBatch(pk)
			if err != nil {
				close(r.got)
				return
			}
			for _, p := range pk[:n] {
				var w wire.Packet
				b := append([]byte(nil), p.Bytes()...)
				if w.Parse(b) == nil {
					r.got <- w
				}
			}
		}
	}()
	t.Cleanup(func() { ea.Close() })
	return r
}

func (r *rawPeer) send(h wire.Packet) {
	r.t.Helper()
	h.BTH.PKey, h.BTH.DestQP = 0xFFFF, r.s.qp.QPN()
	b := h.Append(nil)
	pk := []link.Packet{{Buf: b, N: len(b), Dst: r.s.dev.LocalAddr()}}
	if _, err := r.ep.WriteBatch(pk); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawPeer) expect(op wire.Opcode, psn uint32, syndrome uint8) wire.Packet {
	r.t.Helper()
	select {
	case p := <-r.got:
		if p.BTH.Opcode != op || p.BTH.PSN != psn || (p.Mask&wire.HasAETH != 0 && p.AETH.Syndrome != syndrome) {
			r.t.Fatalf("got %v psn %d syndrome %#x, want %v psn %d syndrome %#x", p.BTH.Opcode, p.BTH.PSN, p.AETH.Syndrome, op, psn, syndrome)
		}
		return p
	case <-time.After(5 * time.Second):
		r.t.Fatalf("no %v psn %d", op, psn)
	}
	return wire.Packet{}
}

func (r *rawPeer) expectNothing() {
	r.t.Helper()
	select {
	case p := <-r.got:
		r.t.Fatalf("unexpected %v psn %d syndrome %#x", p.BTH.Opcode, p.BTH.PSN, p.AETH.Syndrome)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestResponderPSNRules(t *testing.T) {
	r := newRawPeer(t)
	va, key := r.s.mr.Addr(), r.s.mr.RKey()
	w := func(psn uint32, ack bool) wire.Packet {
		return wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PSN: psn, AckReq: ack}, RETH: wire.RETH{VA: va, RKey: key, Length: 4}, Payload: []byte("abcd")}
	}
	// In order, AckReq: one ACK with that PSN, MSN 1.
	r.send(w(100, true))
	if p := r.expect(wire.RCAcknowledge, 100, wire.SyndromeACK); p.AETH.MSN != 1 {
		t.Fatalf("MSN %d", p.AETH.MSN)
	}
	// In order without AckReq: silence.
	r.send(w(101, false))
	r.expectNothing()
	// Gap: one NAK 0x60 carrying ePSN, not repeated until ePSN arrives.
	r.send(w(105, true))
	r.expect(wire.RCAcknowledge, 102, wire.SyndromeNAKSeq)
	r.send(w(106, true))
	r.expectNothing()
	// Duplicate: ACK with ePSN-1 even without AckReq.
	r.send(w(100, false))
	r.expect(wire.RCAcknowledge, 101, wire.SyndromeACK)
	// READ then its duplicate: replayed from the responder resource.
	r.send(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 102, AckReq: true}, RETH: wire.RETH{VA: va, RKey: key, Length: 2048}})
	r.expect(wire.RCReadResponseFirst, 102, wire.SyndromeACK)
	r.expect(wire.RCReadResponseLast, 103, wire.SyndromeACK)
	r.send(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 103, AckReq: true}, RETH: wire.RETH{VA: va + 1024, RKey: key, Length: 1024}})
	// rxe replays a partial READ as the rest of the original response
	// sequence (state "replay": MIDDLE.../LAST).
	if p := r.expect(wire.RCReadResponseLast, 103, wire.SyndromeACK); len(p.Payload) != 1024 {
		t.Fatalf("replayed %d bytes", len(p.Payload))
	}
	// Atomic, then its duplicate answered from the cache (not re-executed).
	fa := wire.Packet{BTH: wire.BTH{Opcode: wire.RCFetchAdd, PSN: 104, AckReq: true}, AtomicETH: wire.AtomicETH{VA: va + 64, RKey: key, SwapAdd: 5}}
	r.send(fa)
	p1 := r.expect(wire.RCAtomicAcknowledge, 104, wire.SyndromeACK)
	r.send(fa)
	p2 := r.expect(wire.RCAtomicAcknowledge, 104, wire.SyndromeACK)
	if p1.AtomicAckETH.Orig != p2.AtomicAckETH.Orig {
		t.Fatal("duplicate atomic re-executed")
	}
	// Misaligned atomic: NAK 0x61 with its PSN, QP to ERR.
	r.send(wire.Packet{BTH: wire.BTH{Opcode: wire.RCFetchAdd, PSN: 105, AckReq: true}, AtomicETH: wire.AtomicETH{VA: va + 4, RKey: key, SwapAdd: 1}})
	r.expect(wire.RCAcknowledge, 105, wire.SyndromeNAKInvReq)
	waitState(t, r.s.qp, QPStateErr)
}

func TestResponderLengthRules(t *testing.T) {
	va := func(r *rawPeer) uint64 { return r.s.mr.Addr() }
	for _, c := range []struct {
		name string
		pkt  func(r *rawPeer) wire.Packet
		syn  uint8
	}{
		{"FIRST shorter than the PMTU", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendFirst, PSN: 100}, Payload: make([]byte, 1000)}
		}, wire.SyndromeNAKInvReq},
		{"ONLY longer than the PMTU", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: 100, AckReq: true}, Payload: make([]byte, 1028)}
		}, wire.SyndromeNAKInvReq},
		{"MIDDLE without FIRST", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendMiddle, PSN: 100}, Payload: make([]byte, 1024)}
		}, wire.SyndromeNAKInvReq},
		{"WRITE payload differs from RETH length", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PSN: 100, AckReq: true},
				RETH: wire.RETH{VA: va(r), RKey: r.s.mr.RKey(), Length: 10}, Payload: make([]byte, 8)}
		}, wire.SyndromeNAKInvReq},
		{"RETH length above 2^31", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 100, AckReq: true},
				RETH: wire.RETH{VA: va(r), RKey: r.s.mr.RKey(), Length: 1<<31 + 1}}
		}, wire.SyndromeNAKInvReq},
		{"READ beyond the MR", func(r *rawPeer) wire.Packet {
			return wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 100, AckReq: true},
				RETH: wire.RETH{VA: va(r) + uint64(len(r.s.buf)) - 10, RKey: r.s.mr.RKey(), Length: 20}}
		}, wire.SyndromeNAKRemAcc},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRawPeer(t)
			postRecv(t, r.s, 1, 0, 1<<16)
			r.send(c.pkt(r))
			r.expect(wire.RCAcknowledge, 100, c.syn)
			waitState(t, r.s.qp, QPStateErr)
		})
	}
}

// TestReceiveChecks: bad P_Key, QP0, unknown QPN, wrong transport and a
// wrong source address are dropped silently and counted (docs/protocol.md §2.1, §9).
func TestReceiveChecks(t *testing.T) {
	r := newRawPeer(t)
	st := r.s.dev.Stats()
	send := func(h wire.Packet, dqp uint32, pkey uint16) {
		h.BTH.PKey, h.BTH.DestQP = pkey, dqp
		b := h.Append(nil)
		if _, err := r.ep.WriteBatch([]link.Packet{{Buf: b, N: len(b), Dst: r.s.dev.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	so := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: 100, AckReq: true}, Payload: []byte("x")}
	send(so, r.s.qp.QPN(), 0x1234) // P_Key mismatch
	send(so, 0, 0xFFFF)            // QP0
	send(so, 0x777, 0xFFFF)        // no such QP
	uc := so
	uc.BTH.Opcode = wire.UCSendOnly
	send(uc, r.s.qp.QPN(), 0xFFFF) // UC opcode to an RC QP
	send(so, r.s.qp.QPN(), 0x7FFF) // limited-member form of the default P_Key: accepted (RNR: no receive posted)
	r.expect(wire.RCAcknowledge, 100, wire.AETHTypeRNR|1)
	if st.DropPKey.Load() != 1 || st.DropNoQP.Load() != 2 || st.DropTransport.Load() != 1 {
		t.Fatalf("drops: pkey %d noqp %d transport %d", st.DropPKey.Load(), st.DropNoQP.Load(), st.DropTransport.Load())
	}
}
