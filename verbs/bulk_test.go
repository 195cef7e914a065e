package verbs

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
)

// BenchmarkBulkQPs streams 1 MiB RDMA WRITEs over UDP loopback on n QP
// pairs of one device pair, one WRITE in flight per QP: the aggregate
// bandwidth of 256 QPs should match one QP's, with no receive-buffer drops
// (the kernel's UDP RcvbufErrors, machine-wide) and no retransmit timeouts.
// It reports the times a QP waited for the device's send budget, the
// peer's ACKs and the most packets in flight at once (budget.go); the
// nobudget case turns the budget off.
func BenchmarkBulkQPs(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) { benchBulkQPs(b, n, 0) })
	}
	// Without the device's send budget (budget.go), for comparison.
	b.Run("qps=256/nobudget", func(b *testing.B) { benchBulkQPs(b, 256, -1) })
	// With 1 MiB socket buffers (SO_RCVBUF 2 MiB as the kernel counts),
	// the budget sized from them, and without it.
	b.Run("qps=256/rcvbuf=1MiB", func(b *testing.B) { benchBulkQPsBuf(b, 256, 0, 1<<20) })
	b.Run("qps=256/rcvbuf=1MiB/nobudget", func(b *testing.B) { benchBulkQPsBuf(b, 256, -1, 1<<20) })
}

func benchBulkQPs(b *testing.B, n, budget int) { benchBulkQPsBuf(b, n, budget, 0) }

func benchBulkQPsBuf(b *testing.B, n, budget, sockBuf int) {
	const size = 1 << 20
	var ea, eb link.Endpoint
	if sockBuf == 0 {
		ea, eb = scaleLink(b, "udp")
	} else {
		a, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.WithAnyPort(), udp.WithSocketBuffer(sockBuf))
		if err != nil {
			b.Skip("UDP loopback unavailable:", err)
		}
		c, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort(), udp.WithSocketBuffer(sockBuf))
		if err != nil {
			a.Close()
			b.Skip("UDP loopback unavailable:", err)
		}
		ea, eb = a, c
	}
	m := newManyQPsConfig(b, ea, eb, n, manyQPsTimeout, &Config{InflightBudget: budget})
	src, err := m.a[0].pd.RegMR(make([]byte, size), AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := m.b[0].pd.RegMR(make([]byte, size), AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, RKey: dst.RKey(), RemoteAddr: dst.Addr(),
		SGList: []SGE{{Addr: src.Addr(), Length: size, LKey: src.LKey()}}}}
	post := func(i int) {
		wr[0].WRID = uint64(i)
		if _, err := m.a[i].PostSend(wr); err != nil {
			b.Fatal(err)
		}
	}
	st := m.da.Stats()
	retr0, tmo0 := st.Retransmits.Load(), st.RetryTimeouts.Load()
	drops0 := udpRcvbufErrors()
	for i := range n {
		post(i)
	}
	wcs := make([]WC, 256)
	// One context for all the waits, cancelled by a watchdog that each
	// wait re-arms: a context per wait would be the loop's allocations.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchdog := time.AfterFunc(time.Minute, cancel)
	defer watchdog.Stop()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := m.cqa.Poll(wcs)
		if k == 0 {
			m.cqa.ReqNotify(false)
			if m.cqa.Len() > 0 {
				continue
			}
			watchdog.Reset(time.Minute)
			_, err := m.ch.GetCQEvent(ctx)
			if err != nil {
				b.Fatalf("no completion for a minute after %d WRITEs: %v", done, err)
			}
			m.cqa.AckEvents(1)
			continue
		}
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess {
				b.Fatalf("WRITE on pair %d: %v", wc.WRID, wc.Status)
			}
			done++
			post(int(wc.WRID))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(st.BudgetWaits.Load())/float64(b.N), "waits/op")
	b.ReportMetric(float64(m.db.Stats().TxPackets.Load())/float64(b.N), "acks/op")
	b.ReportMetric(float64(st.InflightMax.Load()), "inflight-max")
	b.ReportMetric(float64(st.Retransmits.Load()-retr0), "retrans")
	b.ReportMetric(float64(st.RetryTimeouts.Load()-tmo0), "timeouts")
	if d0 := drops0; d0 >= 0 {
		b.ReportMetric(float64(udpRcvbufErrors()-d0), "rcvbuf-drops")
	}
}

// udpRcvbufErrors is the kernel's Udp RcvbufErrors counter (-1 if unknown).
func udpRcvbufErrors() int64 {
	f, err := os.Open("/proc/net/snmp")
	if err != nil {
		return -1
	}
	defer f.Close()
	var names []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "RcvbufErrors" && i < len(fields) {
				v, _ := strconv.ParseInt(fields[i], 10, 64)
				return v
			}
		}
	}
	return -1
}
