package verbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
)

// TestTTLIsTheRoutes: whatever hop_limit the address vector carries (the
// tools use 1, 64 or 255), RC packets and UD datagrams leave with the
// link's default TTL / hop limit (Packet.TTL 0: the route's, 64), as the
// kernel sends them: ib_core overwrites the AH's hop limit, and TTL 1
// would never cross a router.
func TestTTLIsTheRoutes(t *testing.T) {
	for _, hl := range []uint8{1, 255} {
		var bad, n atomic.Int64
		filter := func(p *link.Packet) pipe.Verdict {
			n.Add(1)
			if p.TTL != 0 {
				bad.Store(int64(p.TTL))
			}
			return pipe.Pass
		}
		a, b := newPair(t, pairOpts{filterA: filter, hopLimit: hl})
		postRecv(t, b, 1, 0, 100)
		post(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 10)})
		waitWC(t, a.scq, 1, 10*time.Second)
		// UD through an AH with the same hop limit.
		ua, ub := newPair(t, pairOpts{typ: QPTypeUD, filterA: filter, hopLimit: hl})
		ah, err := ua.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, DstPort: ub.port,
			GRH: GlobalRoute{DGID: ub.dev.gids[1], SGIDIndex: 1, HopLimit: hl}})
		if err != nil {
			t.Fatal(err)
		}
		postRecv(t, ub, 1, 0, 200)
		post(t, ua.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(ua, 0, 10), AH: ah,
			RemoteQPN: ub.qp.QPN(), RemoteQKey: 0x11111111})
		wc := waitWC(t, ub.rcq, 1, 10*time.Second)
		if wc[0].Status != WCSuccess {
			t.Fatalf("%+v", wc[0])
		}
		// The receiver's GRH area holds the IPv4 header: TTL 64.
		if ttl := ub.buf[20+8]; ttl != 64 {
			t.Errorf("hop_limit %d: UD receive GRH shows TTL %d, want 64", hl, ttl)
		}
		if n.Load() == 0 || bad.Load() != 0 {
			t.Errorf("hop_limit %d: %d packets, one sent with TTL %d (want 0: the route's)", hl, n.Load(), bad.Load())
		}
	}
}
