package verbs

import (
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/link/tee"
	"github.com/softroce/softroce/wire"
)

// TestTeeKeepsSendPath: a device behind a tee (every tool's --pcap) takes
// the send budget and the send path (zero-copy on or off) it takes on the
// bare link, whose capabilities (a receive buffer, gather writes) the tee
// passes on; and the tee records each zero-copy datagram whole. In a
// bubble: no retransmission on a loaded machine adds datagrams.
func TestTeeKeepsSendPath(t *testing.T) {
	if raceEnabled {
		t.Skip("a build with the race detector sends no payload zero-copy (racedetect_on.go); the tests without -race cover it")
	}
	synctest.Test(t, func(t *testing.T) {
		const rcvbuf = 300 * (1024 + budgetPktOverhead) // a budget of 300 MTU1024 packets
		for _, noZC := range []bool{false, true} {
			type path struct {
				limit int64
				zc    bool
			}
			var got [2]path
			var a, b *side
			type sent struct {
				src, dst netip.AddrPort
				b        []byte
			}
			var mu sync.Mutex
			var out []sent // datagrams the tee reported sent
			for i, teed := range []bool{false, true} {
				ea, eb, err := pipe.New(pipe.Config{ReceiveBuffer: rcvbuf, GatherWrite: true},
					pipe.Config{ReceiveBuffer: rcvbuf, GatherWrite: true})
				if err != nil {
					t.Fatal(err)
				}
				var ep link.Endpoint = ea
				if teed {
					ep = tee.New(ea, func(d tee.Direction, src, dst netip.AddrPort, _ uint8, p []byte) {
						if d == tee.Out {
							mu.Lock()
							out = append(out, sent{src, dst, append([]byte(nil), p...)})
							mu.Unlock()
						}
					})
				}
				a, b = newPairOn(t, ep, eb, pairOpts{pmtu: wire.MTU1024, noZC: noZC})
				got[i] = path{a.dev.budget.limit, a.dev.zc}
			}
			if got[0] != got[1] {
				t.Errorf("NoZeroCopySend %v: behind a tee budget, zero-copy = %d, %v; without %d, %v",
					noZC, got[1].limit, got[1].zc, got[0].limit, got[0].zc)
			}
			if got[0].limit != 300 || got[0].zc == noZC {
				t.Errorf("NoZeroCopySend %v: budget, zero-copy = %d, %v; want 300, %v", noZC, got[0].limit, got[0].zc, !noZC)
			}

			// A WRITE of 4 full packets from the teed device: sent in place
			// unless NoZeroCopySend, and recorded whole either way (its ICRC
			// checks over the datagram, which holds the payload).
			mu.Lock()
			out = nil
			mu.Unlock()
			fill(a.buf[:4096], 3)
			post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 4096),
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			if wc := waitWC(t, a.scq, 1, 10*time.Second)[0]; wc.Status != WCSuccess {
				t.Fatalf("NoZeroCopySend %v: %+v", noZC, wc)
			}
			if n, want := a.dev.Stats().ZeroCopyPackets.Load(), map[bool]uint64{false: 4, true: 0}[noZC]; n != want {
				t.Errorf("NoZeroCopySend %v: %d packets sent in place, want %d", noZC, n, want)
			}
			mu.Lock()
			full := 0
			for i, s := range out {
				if id, ok := wire.VerifyICRCAddrs(s.src, s.dst, s.b); !ok || id != 0 { // the pipe's IPv4 ID is 0
					t.Errorf("NoZeroCopySend %v: recorded datagram %d (%d bytes) fails its ICRC: not whole", noZC, i, len(s.b))
				}
				if len(s.b) > 1024 {
					full++
				}
			}
			mu.Unlock()
			if full != 4 {
				t.Errorf("NoZeroCopySend %v: %d datagrams with a full payload recorded, want 4", noZC, full)
			}
		}
	})
}
