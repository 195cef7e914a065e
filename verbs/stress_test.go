package verbs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
)

// TestManyQPsConcurrent runs 8 RC QP pairs on one pair of devices, each
// driven by its own goroutine, over a lossy link: per-QP ordering and data
// must hold while the devices' receive loops and timers interleave them.
func TestManyQPsConcurrent(t *testing.T) {
	o := pairOpts{faults: pipe.Faults{Loss: 0.05, Duplicate: 0.02, Reorder: 0.02}, timeout: 12, seed: 7}
	defaults(&o)
	ea, eb := newPipePair(t, &o)
	a0, b0 := newSide(t, ea, o), newSide(t, eb, o)
	const pairs = 8
	var wg sync.WaitGroup
	errc := make(chan error, pairs)
	for k := 0; k < pairs; k++ {
		// Each pair gets its own QPs and CQs on the shared devices.
		mk := func(s *side) *side {
			n := &side{dev: s.dev, pd: s.pd, port: s.port}
			n.scq, _ = s.dev.CreateCQ(1024, nil, nil)
			n.rcq, _ = s.dev.CreateCQ(1024, nil, nil)
			n.qp, _ = s.pd.CreateQP(&QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq, QPType: QPTypeRC,
				Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			n.buf = make([]byte, 256<<10)
			n.mr, _ = s.pd.RegMR(n.buf, o.access|AccessLocalWrite)
			return n
		}
		a, b := mk(a0), mk(b0)
		connect(t, a, b, o)
		connect(t, b, a, o)
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errc <- func() error {
				for i := 0; i < 10; i++ {
					size := 1 + (i*997+k*31)%20000
					fill(a.buf[:size], byte(i+k))
					if _, err := b.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGList: sge(b, 0, 32<<10)}}); err != nil {
						return err
					}
					if _, err := a.qp.PostSend([]SendWR{
						{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, size)},
						{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, size), RemoteAddr: b.mr.Addr() + 64<<10, RKey: b.mr.RKey()},
						{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 128<<10, size), RemoteAddr: b.mr.Addr() + 64<<10, RKey: b.mr.RKey()},
					}); err != nil {
						return err
					}
					deadline := time.Now().Add(20 * time.Second)
					var wcs [3]WC
					for got := 0; got < 3; {
						got += a.scq.Poll(wcs[got:])
						if time.Now().After(deadline) {
							return fmt.Errorf("pair %d message %d: %d of 3 completions", k, i, got)
						}
						time.Sleep(50 * time.Microsecond)
					}
					for j, wc := range wcs {
						if wc.Status != WCSuccess || wc.WRID != uint64(j+1) {
							return fmt.Errorf("pair %d message %d: %+v", k, i, wc)
						}
					}
					var rwc [1]WC
					for b.rcq.Poll(rwc[:]) == 0 {
						if time.Now().After(deadline) {
							return fmt.Errorf("pair %d message %d: no receive completion", k, i)
						}
						time.Sleep(50 * time.Microsecond)
					}
					if rwc[0].ByteLen != uint32(size) || string(b.buf[:size]) != string(a.buf[:size]) ||
						string(a.buf[128<<10:128<<10+size]) != string(a.buf[:size]) {
						return fmt.Errorf("pair %d message %d: data mismatch", k, i)
					}
				}
				return nil
			}()
		}(k)
	}
	wg.Wait()
	close(errc)
	for _, d := range []*Device{a0.dev, b0.dev} {
		st := d.Stats()
		t.Logf("tx %d rx %d retransmits %d timeouts %d seqNAKs %d/%d dup %d dropResp %d outOfSeq %d", st.TxPackets.Load(), st.RxPackets.Load(),
			st.Retransmits.Load(), st.RetryTimeouts.Load(), st.SeqNAKsSent.Load(), st.SeqNAKsRcvd.Load(), st.DupRequests.Load(),
			st.DropResponse.Load(), st.DropOutOfSeq.Load())
	}
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
}
