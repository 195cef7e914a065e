package verbs_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// TestLossTable measures RC WRITE, READ and SEND of 1 MiB messages, 16 in
// flight, between two devices joined by link/pipe with faults on both
// directions: none, 1 % and 5 % loss, and 25 % of the datagrams held back
// 2 ms (reordering). It prints one line per case: MB/s and retransmit
// timeouts per MiB. It is a measurement, not a check, and runs only when
// SOFTROCE_LOSS_TABLE is set (its value is the seconds per case, default
// 3); internal/losstable runs it for two builds (before/after) and prints
// the table docs/speed.md keeps. It uses only the exported API, so that the
// same file measures an older tree.
func TestLossTable(t *testing.T) {
	v := os.Getenv("SOFTROCE_LOSS_TABLE")
	if v == "" {
		t.Skip("a measurement: set SOFTROCE_LOSS_TABLE=<seconds per case> (internal/losstable runs it)")
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 {
		secs = 3
	}
	conds := []struct {
		name string
		f    pipe.Faults
	}{
		{"none", pipe.Faults{}},
		{"loss1", pipe.Faults{Loss: 0.01}},
		{"loss5", pipe.Faults{Loss: 0.05}},
		{"reorder25", pipe.Faults{Reorder: 0.25, ReorderMax: 1 << 20, ReorderTimeout: 2 * time.Millisecond}},
	}
	only := os.Getenv("SOFTROCE_LOSS_TABLE_ONLY") // e.g. "read/loss1"
	for _, op := range []string{"write", "read", "send"} {
		for _, c := range conds {
			name := op + "/" + c.name
			if only != "" && only != name && only != op && only != c.name {
				continue
			}
			mbs, tmo, mib := lossRun(t, op, c.f, time.Duration(secs*float64(time.Second)))
			fmt.Printf("LOSSTABLE %s %s %.3f MB/s %.3f timeouts/MiB %d MiB\n", op, c.name, mbs, tmo, mib)
		}
	}
}

// lossCap bounds a case's run when fewer than two messages completed in
// its time.
const lossCap = 40 * time.Second

// lossRun streams 1 MiB messages of op for about d and returns MB/s,
// retransmit timeouts per MiB and the MiB moved.
func lossRun(t *testing.T, op string, f pipe.Faults, d time.Duration) (float64, float64, int) {
	const size, depth = 1 << 20, 16
	fa, fb := f, f
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 65536, Faults: fa, Seed: 1, QueueLen: 4096},
		pipe.Config{MTU: 65536, Faults: fb, Seed: 2, QueueLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	defer db.Close()
	var ends [2]*end
	var chs [2]*verbs.CompChannel
	for i, dev := range []*verbs.Device{da, db} {
		e := &end{dev: dev}
		e.pd = must[*verbs.PD](t)(dev.AllocPD())
		chs[i] = dev.CreateCompChannel()
		e.cq = must[*verbs.CQ](t)(dev.CreateCQ(256, nil, chs[i]))
		e.qp = must[*verbs.QP](t)(e.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}))
		e.buf = make([]byte, 2*depth*size)
		e.mr = must[*verbs.MR](t)(e.pd.RegMR(e.buf, allAccess))
		ends[i] = e
	}
	for _, p := range [][2]*end{{ends[0], ends[1]}, {ends[1], ends[0]}} {
		e, peer := p[0], p[1]
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: allAccess},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU4096, DestQPNum: peer.qp.QPN(),
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: av(peer.dev)},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
	a, b := ends[0], ends[1]
	wr := verbs.SendWR{Flags: verbs.SendSignaled, RKey: b.mr.RKey()}
	switch op {
	case "write":
		wr.Opcode = verbs.WRRDMAWrite
	case "read":
		wr.Opcode = verbs.WRRDMARead
	default:
		wr.Opcode = verbs.WRSend
	}
	if op == "send" {
		for i := 0; i < 2*depth; i++ {
			if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: b.sge((i%depth)*size, size)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st0 := da.Stats().RetryTimeouts.Load() + db.Stats().RetryTimeouts.Load()
	wcs := make([]verbs.WC, 16)
	start := time.Now()
	posted, done := 0, 0
	for {
		if el := time.Since(start); el >= d && done >= 2 || el >= d+lossCap {
			break // the messages still in flight are not counted
		}
		for posted-done < depth {
			slot := posted % depth
			w := wr
			w.WRID = uint64(posted)
			w.SGList = a.sge(slot*size, size)
			w.RemoteAddr = b.mr.Addr() + uint64(slot*size)
			if _, err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		if op == "send" {
			// The receiver reposts each receive it got back.
			for k := b.cq.Poll(wcs); k > 0; k = b.cq.Poll(wcs) {
				for _, wc := range wcs[:k] {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("%s: receive %v", op, wc.Status)
					}
					if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: wc.WRID, SGList: b.sge(int(wc.WRID%depth)*size, size)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		k := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("%s: %v after %d messages", op, wc.Status, done)
			}
		}
		done += k
		if k == 0 {
			lossWait(a.cq, chs[0], op == "send")
		}
	}
	el := time.Since(start)
	tmo := da.Stats().RetryTimeouts.Load() + db.Stats().RetryTimeouts.Load() - st0
	if os.Getenv("SOFTROCE_LOSS_TABLE_STATS") != "" {
		for i, dev := range []*verbs.Device{da, db} {
			fmt.Printf("  %c: %s\n", 'a'+i, nonZero(dev.Stats()))
		}
	}
	return float64(done*size) / el.Seconds() / 1e6, float64(tmo) / float64(done), done
}

// lossWait waits for a completion on cq (at most a millisecond when the
// caller also serves the receiver's CQ).
func lossWait(cq *verbs.CQ, ch *verbs.CompChannel, short bool) {
	cq.ReqNotify(false)
	if cq.Len() > 0 {
		return
	}
	ctx := context.Background()
	if short {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
	}
	if c, err := ch.GetCQEvent(ctx); err == nil {
		c.AckEvents(1)
	}
}

// nonZero lists a device's non-zero counters (by reflection: the same code
// runs against trees with other counters).
func nonZero(st *verbs.Stats) string {
	var b strings.Builder
	v := reflect.ValueOf(st).Elem()
	for i := 0; i < v.NumField(); i++ {
		if c, ok := v.Field(i).Addr().Interface().(*atomic.Uint64); ok {
			if n := c.Load(); n != 0 {
				fmt.Fprintf(&b, "%s=%d ", v.Type().Field(i).Name, n)
			}
		}
	}
	return b.String()
}
