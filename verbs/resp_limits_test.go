package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/clock/clocktest"
	"github.com/softroce/softroce/wire"
)

// TestResponderLimitsExact: the responder's length rules at their exact
// values, each alone (the RETH names a valid range of the MR unless the
// case is about the RETH): NAK 0x61 with the offending packet's PSN and
// the QP in ERR, memory untouched.
func TestResponderLimitsExact(t *testing.T) {
	for _, c := range []struct {
		name string
		pkts func(r *rawPeer) []wire.Packet // the last one is refused
	}{
		{"WRITE MIDDLE where the LAST is due", func(r *rawPeer) []wire.Packet {
			reth := wire.RETH{VA: r.s.mr.Addr(), RKey: r.s.mr.RKey(), Length: 2048}
			return []wire.Packet{
				{BTH: wire.BTH{Opcode: wire.RCWriteFirst, PSN: 100}, RETH: reth, Payload: make([]byte, 1024)},
				{BTH: wire.BTH{Opcode: wire.RCWriteMiddle, PSN: 101}, Payload: make([]byte, 1024)},
			}
		}},
		{"WRITE FIRST of exactly one PMTU", func(r *rawPeer) []wire.Packet {
			return []wire.Packet{{BTH: wire.BTH{Opcode: wire.RCWriteFirst, PSN: 100},
				RETH: wire.RETH{VA: r.s.mr.Addr(), RKey: r.s.mr.RKey(), Length: 1024}, Payload: make([]byte, 1024)}}
		}},
		{"WRITE RETH length 2^31+1", func(r *rawPeer) []wire.Packet {
			return []wire.Packet{{BTH: wire.BTH{Opcode: wire.RCWriteFirst, PSN: 100},
				RETH: wire.RETH{VA: r.s.mr.Addr(), RKey: r.s.mr.RKey(), Length: 1<<31 + 1}, Payload: make([]byte, 1024)}}
		}},
		{"ATOMIC_WRITE RETH length 16", func(r *rawPeer) []wire.Packet {
			return []wire.Packet{{BTH: wire.BTH{Opcode: wire.RCAtomicWrite, PSN: 100, AckReq: true},
				RETH: wire.RETH{VA: r.s.mr.Addr() + 64, RKey: r.s.mr.RKey(), Length: 16}, Payload: []byte("ATOMWRIT")}}
		}},
		{"ATOMIC_WRITE misaligned by 4", func(r *rawPeer) []wire.Packet {
			return []wire.Packet{{BTH: wire.BTH{Opcode: wire.RCAtomicWrite, PSN: 100, AckReq: true},
				RETH: wire.RETH{VA: r.s.mr.Addr() + 68, RKey: r.s.mr.RKey(), Length: 8}, Payload: []byte("ATOMWRIT")}}
		}},
		{"FETCH_ADD misaligned by 4", func(r *rawPeer) []wire.Packet {
			return []wire.Packet{{BTH: wire.BTH{Opcode: wire.RCFetchAdd, PSN: 100, AckReq: true},
				AtomicETH: wire.AtomicETH{VA: r.s.mr.Addr() + 68, RKey: r.s.mr.RKey(), SwapAdd: 1}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRawPeer(t)
			fill(r.s.buf, 0x3D)
			canary := append([]byte(nil), r.s.buf...)
			pkts := c.pkts(r)
			for _, p := range pkts {
				r.send(p)
			}
			last := pkts[len(pkts)-1].BTH.PSN
			r.expect(wire.RCAcknowledge, last, wire.SyndromeNAKInvReq)
			waitState(t, r.s.qp, QPStateErr)
			if len(pkts) == 1 {
				mustEqual(t, r.s.buf, canary)
			}
		})
	}
}

// TestResponderMoreReadsThanResources: a requester that sends more READs
// than the responder's max_dest_rd_atomic (16 here) has every one of them
// answered, in PSN order, each response once. The responder resources are
// a ring whose oldest entry the next READ takes; rxe answers a READ to its
// end before it takes the next request, so the entry taken is always
// finished, and a paced responder (resp_pace.go) sends the rest of a READ
// whose entry is taken at once (docs/protocol.md §5.7). A duplicate of one
// of the four oldest READs, whose entries are gone, is dropped; one of the
// sixteen newest is answered again.
func TestResponderMoreReadsThanResources(t *testing.T) {
	for _, paced := range []bool{false, true} {
		name := "unpaced"
		if paced {
			name = "paced"
		}
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewFake(time.Unix(0, 0))
			r := newRawPeerWith(t, pairOpts{clock: clk})
			if paced {
				qp := r.s.qp
				qp.mu.Lock()
				p := qp.newPacer()
				p.burst, p.tokens = 1, 1 // one response a tick
				qp.mu.Unlock()
			}
			const reads, per, pmtu = 20, 4, 1024 // four responses a READ
			fill(r.s.buf, 0x5A)
			read := func(i int) wire.Packet {
				return wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: uint32(100 + i*per)},
					RETH: wire.RETH{VA: r.s.mr.Addr() + uint64(i*per*pmtu), RKey: r.s.mr.RKey(), Length: per * pmtu}}
			}
			// next returns the next response, moving the clock on while
			// the pacer holds responses back.
			next := func() wire.Packet {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					select {
					case p, ok := <-r.got:
						if !ok {
							t.Fatal("the pipe closed")
						}
						return p
					case <-time.After(2 * time.Millisecond):
						if time.Now().After(deadline) {
							t.Fatal("no response in 10 s")
						}
						clk.Advance(paceTick)
					}
				}
			}
			// expectRead takes READ i's responses from PSN index j on.
			expectRead := func(i, j int) {
				t.Helper()
				for ; j < per; j++ {
					p := next()
					psn := uint32(100 + i*per + j)
					op := []wire.Opcode{wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseMiddle, wire.RCReadResponseLast}[j]
					if p.BTH.Opcode != op || p.BTH.PSN != psn {
						t.Fatalf("READ %d: got %v PSN %d, want %v PSN %d", i, p.BTH.Opcode, p.BTH.PSN, op, psn)
					}
					off := (i*per + j) * pmtu
					mustEqual(t, p.Payload, r.s.buf[off:off+pmtu])
				}
			}
			for i := range reads {
				r.send(read(i))
			}
			for i := range reads {
				expectRead(i, 0)
			}
			drops := r.s.dev.Stats().DropDuplicate.Load()
			r.send(read(0))
			r.send(read(4))
			expectRead(4, 0)
			if d := r.s.dev.Stats().DropDuplicate.Load() - drops; d != 1 {
				t.Errorf("%d duplicates dropped, want 1 (READ 0's)", d)
			}
			if st := r.s.qp.State(); st != QPStateRTS {
				t.Errorf("QP in %v, want RTS", st)
			}
		})
	}
}
