package verbs_test

import (
	"context"
	"io"
	"net"
	"os"
	"testing"

	"github.com/softroce/softroce/verbs"
)

// benchLink is the link the RC benchmarks use: UDP loopback, or link/pipe
// with SOFTROCE_BENCH_LINK=pipe.
var benchLink = func() linkKind {
	if os.Getenv("SOFTROCE_BENCH_LINK") == "pipe" {
		return linkKinds[0]
	}
	return linkKinds[1]
}()

// benchEnds connects two RC QPs over UDP loopback (pipe if UDP is not
// available), path MTU 4096, with completion channels.
func benchEnds(b *testing.B) (*end, *end, []*verbs.CompChannel) {
	da, db := benchLink.open(b)
	var ends [2]*end
	var chs []*verbs.CompChannel
	for i, d := range []*verbs.Device{da, db} {
		e := &end{dev: d}
		e.pd = must[*verbs.PD](b)(d.AllocPD())
		ch := d.CreateCompChannel()
		chs = append(chs, ch)
		e.cq = must[*verbs.CQ](b)(d.CreateCQ(1024, nil, ch))
		e.qp = must[*verbs.QP](b)(e.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}}))
		e.buf = make([]byte, 4<<20)
		e.mr = must[*verbs.MR](b)(e.pd.RegMR(e.buf, allAccess))
		ends[i] = e
	}
	for _, p := range [][2]*end{{ends[0], ends[1]}, {ends[1], ends[0]}} {
		e, peer := p[0], p[1]
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: allAccess},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			b.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU4096, DestQPNum: peer.qp.QPN(),
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: av(peer.dev)},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			b.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			b.Fatal(err)
		}
	}
	return ends[0], ends[1], chs
}

// waitCQ blocks until cq may have completions (arm, re-check, wait for the
// event): busy polling would starve Go's network poller.
func waitCQ(cq *verbs.CQ, ch *verbs.CompChannel) {
	cq.ReqNotify(false)
	if cq.Len() > 0 {
		return
	}
	if c, err := ch.GetCQEvent(context.Background()); err == nil {
		c.AckEvents(1)
	}
}

func BenchmarkRCWrite1MiB(b *testing.B) {
	a, p, chs := benchEnds(b)
	const size = 1 << 20
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, size),
		RemoteAddr: p.mr.Addr() + size, RKey: p.mr.RKey()}}
	wcs := make([]verbs.WC, 4)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0) }()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < 4 {
			if _, err := a.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				b.Fatal(wc.Status)
			}
		}
		done += k
		if k == 0 {
			waitCQ(a.cq, chs[0])
		}
	}
}

func BenchmarkRCSendPingPong64(b *testing.B) {
	a, p, chs := benchEnds(b)
	sa := []verbs.SendWR{{Opcode: verbs.WRSend, SGList: a.sge(0, 64)}}
	sp := []verbs.SendWR{{Opcode: verbs.WRSend, SGList: p.sge(0, 64)}}
	ra := []verbs.RecvWR{{SGList: a.sge(4096, 64)}}
	rp := []verbs.RecvWR{{SGList: p.sge(4096, 64)}}
	a.qp.PostRecv(ra)
	p.qp.PostRecv(rp)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		wcs := make([]verbs.WC, 4)
		for {
			k := p.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Opcode == verbs.WCRecv {
					p.qp.PostRecv(rp)
					p.qp.PostSend(sp)
				}
			}
			if k == 0 {
				select {
				case <-stop:
					return
				default:
				}
				waitCQ(p.cq, chs[1])
			}
		}
	}()
	wcs := make([]verbs.WC, 4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.qp.PostSend(sa)
		for got := false; !got; {
			k := a.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					b.Fatal(wc.Status)
				}
				if wc.Opcode == verbs.WCRecv {
					got = true
					a.qp.PostRecv(ra)
				}
			}
			if k == 0 {
				waitCQ(a.cq, chs[0])
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/half-rtt")
	close(stop)
	// Wake the echo goroutine: one more round trip.
	a.qp.PostSend(sa)
	<-done
}

func tcpConns(b *testing.B) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skip(err)
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

// BenchmarkTCPStream1MiB is the single-stream TCP loopback baseline.
func BenchmarkTCPStream1MiB(b *testing.B) {
	c1, c2 := tcpConns(b)
	go io.Copy(io.Discard, c2)
	buf := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := c1.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
}

// BenchmarkTCPPingPong64 is the 64-byte TCP ping-pong baseline.
func BenchmarkTCPPingPong64(b *testing.B) {
	c1, c2 := tcpConns(b)
	go func() {
		m := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c2, m); err != nil {
				return
			}
			if _, err := c2.Write(m); err != nil {
				return
			}
		}
	}()
	m := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c1.Write(m)
		if _, err := io.ReadFull(c1, m); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/half-rtt")
}

// BenchmarkRCSend64 streams 64-byte SENDs (64 in flight): per-message
// costs, the ACK per message included.
func BenchmarkRCSend64(b *testing.B) {
	a, p, chs := benchEnds(b)
	const depth = 64
	sw := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 64)}}
	rw := make([]verbs.RecvWR, 256)
	for i := range rw {
		rw[i] = verbs.RecvWR{SGList: p.sge(4096, 64)}
	}
	if _, err := p.qp.PostRecv(rw); err != nil {
		b.Fatal(err)
	}
	wcs := make([]verbs.WC, depth)
	rwcs := make([]verbs.WC, depth)
	b.SetBytes(64)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := a.qp.PostSend(sw); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				b.Fatal(wc.Status)
			}
		}
		done += k
		// Replenish the receiver.
		if r := p.cq.Poll(rwcs); r > 0 {
			p.qp.PostRecv(rw[:r])
		}
		if k == 0 {
			waitCQ(a.cq, chs[0])
		}
	}
	reportCPU(b, cpu0)
}
