package engine

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
)

// TestFaultMatrix runs SEND, WRITE, READ and atomics over a lossy,
// duplicating, reordering and corrupting link: every message exactly once,
// in order, bytes verified.
func TestFaultMatrix(t *testing.T) {
	for _, loss := range []float64{0.01, 0.10, 0.30} {
		t.Run(fmt.Sprintf("loss%.0f%%", loss*100), func(t *testing.T) {
			f := pipe.Faults{Loss: loss, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.02}
			a, b := newPair(t, pairOpts{faults: f, timeout: 12, seed: uint64(loss * 1000)})
			const msgs = 40
			const slot = 8192
			for i := 0; i < msgs; i++ {
				postRecv(t, b, uint64(i), i*slot, slot)
			}
			for i := 0; i < msgs; i++ {
				size := 1 + (i*1237)%(slot-1)
				src := a.buf[i*slot : i*slot+size]
				fill(src, byte(i))
				post(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, i*slot, size)})
			}
			wcs := waitWC(t, b.rcq, msgs, 30*time.Second)
			for i, wc := range wcs {
				size := 1 + (i*1237)%(slot-1)
				if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(size) {
					t.Fatalf("recv %d: %+v", i, wc)
				}
				mustEqual(t, b.buf[i*slot:i*slot+size], a.buf[i*slot:i*slot+size])
			}
			swc := waitWC(t, a.scq, msgs, 30*time.Second)
			for i, wc := range swc {
				if wc.Status != WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("send %d: %+v", i, wc)
				}
			}
			if n := b.rcq.Poll(make([]WC, 4)); n != 0 {
				t.Fatalf("%d extra receive completions", n)
			}
			// WRITE 200 KiB, READ it back, and 20 FETCH_ADDs.
			const big = 200 << 10
			fill(a.buf[:big], 77)
			post(t, a.qp, SendWR{WRID: 100, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, big),
				RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
			post(t, a.qp, SendWR{WRID: 101, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 512<<10, big),
				RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
			for i := 0; i < 20; i++ {
				post(t, a.qp, SendWR{WRID: 200 + uint64(i), Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled,
					SGList: sge(a, 300<<10+8*i, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 1})
			}
			wcs = waitWC(t, a.scq, 22, 30*time.Second)
			for _, wc := range wcs {
				if wc.Status != WCSuccess {
					t.Fatalf("%+v", wc)
				}
			}
			mustEqual(t, b.buf[4096:4096+big], a.buf[:big])
			mustEqual(t, a.buf[512<<10:512<<10+big], a.buf[:big])
			if v := binary.NativeEndian.Uint64(b.buf[8:]); v != 20 {
				t.Fatalf("counter %d after 20 fetch-adds (atomics must execute exactly once)", v)
			}
			for i := 0; i < 20; i++ {
				if v := binary.NativeEndian.Uint64(a.buf[300<<10+8*i:]); v != uint64(i) {
					t.Fatalf("fetch-add %d returned %d", i, v)
				}
			}
			st := a.dev.Stats()
			t.Logf("retransmits %d timeouts %d seqNAKs %d icrc %d/%d dup %d", st.Retransmits.Load(), st.RetryTimeouts.Load(),
				st.SeqNAKsRcvd.Load(), st.ICRCErrors.Load(), b.dev.Stats().ICRCErrors.Load(), b.dev.Stats().DupRequests.Load())
		})
	}
}
