package verbs

import (
	"testing"

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
