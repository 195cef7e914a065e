package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

func init() {
	registerCmd(&cli.Command{Name: "demo", Summary: "two devices on loopback: RC SEND/WRITE/READ/atomics, then speed vs TCP", Run: runDemo})
}

// demoEnd is one side of the demo: device, PD, MR, CQ and an RC QP.
type demoEnd struct {
	dev *verbs.Device
	ch  *verbs.CompChannel
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	buf []byte
	mr  *verbs.MR
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	g := cli.Getopt{Prog: "softroce demo", LongOnly: true, Synopsis: "[-a ADDR:PORT] [-b ADDR:PORT] [--pipe] [--time DURATION] [-v]"}
	addrA, addrB := "127.0.0.1:4791", "127.0.0.2:4791"
	var usePipe, verbose bool
	dur := time.Second
	g.Str('a', "", &addrA).Describe("addr:port", "first device's UDP address (default 127.0.0.1:4791)")
	g.Str('b', "", &addrB).Describe("addr:port", "second device's UDP address (default 127.0.0.2:4791)")
	g.Flag(0, "pipe", &usePipe).Describe("", "use the in-memory link instead of UDP")
	g.Dur(0, "time", &dur).Describe("duration", "duration of each speed measurement (default 1s)")
	g.Flag('v', "", &verbose).Describe("", "print the devices' counters at the end")
	ops, code, ok := g.ParseArgs(args, stdout, stderr, nil)
	if !ok {
		return code
	}
	if len(ops) > 0 {
		return cli.UsageErr(stderr, g.Prog, "unexpected argument %q", ops[0])
	}
	for _, o := range []struct {
		name, v string
	}{{"-a", addrA}, {"-b", addrB}} {
		if _, err := netip.ParseAddrPort(o.v); err != nil {
			return cli.UsageErr(stderr, g.Prog, "%s %q: want IP:PORT, like 127.0.0.1:4791", o.name, o.v)
		}
	}
	// Explicit addresses must be used as given: no fallback to other ports
	// or to the in-memory link.
	explicit := g.Opts[0].Seen || g.Opts[1].Seen
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	da, db, how, err := demoDevices(addrA, addrB, usePipe, explicit)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return cli.ExitFailure
	}
	defer da.Close()
	defer db.Close()
	fmt.Fprintf(stdout, "devices: %s (%v) and %s (%v) over %s\n", "A", da.LocalAddr(), "B", db.LocalAddr(), how)
	a, b, err := demoConnect(da, db)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "RC QPs: A qpn 0x%x <-> B qpn 0x%x, path MTU %d\n", a.qp.QPN(), b.qp.QPN(), da.ActiveMTU().Bytes())
	if err := demoOps(stdout, a, b); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	err = demoSpeed(stdout, a, b, dur)
	if verbose {
		for _, d := range []*verbs.Device{da, db} {
			fmt.Fprintf(stdout, "\n%v counters:\n", d.LocalAddr())
			printStats(stdout, d.Stats())
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// demoDevices opens two devices on UDP loopback (ephemeral ports if 4791 is
// taken), or on link/pipe if UDP is impossible or asked for.
func demoDevices(a, b string, usePipe, explicit bool) (*verbs.Device, *verbs.Device, string, error) {
	if !usePipe {
		da, err := verbs.OpenUDP(a, nil)
		if err == nil {
			db, err := verbs.OpenUDP(b, nil)
			if err == nil {
				return da, db, "UDP", nil
			}
			da.Close()
			if explicit {
				return nil, nil, "", fmt.Errorf("-b %s: %w", b, err)
			}
		} else if explicit {
			return nil, nil, "", fmt.Errorf("-a %s: %w", a, err)
		}
		// Port 4791 busy (e.g. kernel rxe loaded): ephemeral ports.
		ha, _, _ := net.SplitHostPort(a)
		hb, _, _ := net.SplitHostPort(b)
		da, err = verbs.OpenUDP(net.JoinHostPort(ha, "0"), nil)
		if err == nil {
			db, err := verbs.OpenUDP(net.JoinHostPort(hb, "0"), nil)
			if err == nil {
				return da, db, "UDP (ephemeral ports: 4791 was busy)", nil
			}
			da.Close()
		}
	}
	da, db, err := verbs.OpenPipe(pipe.Config{MTU: 65536}, pipe.Config{MTU: 65536})
	if err != nil {
		return nil, nil, "", err
	}
	how := "link/pipe (in memory)"
	if !usePipe {
		how += ": UDP loopback was not available"
	}
	return da, db, how, nil
}

const demoBuf = 8 << 20

func demoConnect(da, db *verbs.Device) (*demoEnd, *demoEnd, error) {
	mk := func(d *verbs.Device) (*demoEnd, error) {
		e := &demoEnd{dev: d, buf: make([]byte, demoBuf)}
		var err error
		if e.pd, err = d.AllocPD(); err != nil {
			return nil, err
		}
		e.ch = d.CreateCompChannel()
		if e.cq, err = d.CreateCQ(1024, nil, e.ch); err != nil {
			return nil, err
		}
		if e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, err
		}
		acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		if e.mr, err = e.pd.RegMR(e.buf, acc); err != nil {
			return nil, err
		}
		return e, nil
	}
	a, err := mk(da)
	if err != nil {
		return nil, nil, err
	}
	b, err := mk(db)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range [][2]*demoEnd{{a, b}, {b, a}} {
		if err := demoModify(p[0], p[1]); err != nil {
			return nil, nil, err
		}
	}
	return a, b, nil
}

func demoModify(e, peer *demoEnd) error {
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: acc},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	gid, _ := peer.dev.QueryGID(1, 1)
	if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: wire.MTU4096, DestQPNum: peer.qp.QPN(),
		RQPSN: 0x1234, MaxDestRdAtomic: 16, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, DstPort: peer.dev.LocalAddr().Port(),
			GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0x1234, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

func (e *demoEnd) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

// wait polls e's CQ for n successful completions.
func (e *demoEnd) wait(n int, wcs []verbs.WC) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got := 0; got < n; {
		k := e.cq.Poll(wcs[:min(len(wcs), n-got)])
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("work completion %d: %v", wc.WRID, wc.Status)
			}
		}
		got += k
		if k == 0 && e.sleep(ctx) != nil {
			return fmt.Errorf("timed out waiting for completions (%d of %d)", got, n)
		}
	}
	return nil
}

// sleep blocks until the CQ may have completions: it arms the CQ, and if
// it is still empty waits for the completion event (ibv_req_notify_cq +
// ibv_get_cq_event). Busy polling would starve Go's network poller.
func (e *demoEnd) sleep(ctx context.Context) error {
	if err := e.cq.ReqNotify(false); err != nil {
		return err
	}
	if e.cq.Len() > 0 {
		return nil
	}
	cq, err := e.ch.GetCQEvent(ctx)
	if err != nil {
		return err
	}
	cq.AckEvents(1)
	return nil
}

// pollWait is the ping-pong's wait for a completion, as an RDMA program
// spins on its CQ while the NIC works: it receives what the device's
// socket holds on this goroutine (Device.PollLink) and, when nothing came,
// yields the processor to the other end. A link that cannot be polled (the
// in-memory pipe) waits on the completion channel instead.
func (e *demoEnd) pollWait(ctx context.Context) error {
	if !e.dev.CanPollLink() {
		return e.sleep(ctx)
	}
	if e.dev.PollLink() == 0 {
		runtime.Gosched()
	}
	return nil
}

func demoOps(w io.Writer, a, b *demoEnd) error {
	wcs := make([]verbs.WC, 16)
	msg := []byte("hello from softroce over RoCEv2")
	copy(a.buf, msg)
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.sge(0, 4096)}}); err != nil {
		return err
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, len(msg))}}); err != nil {
		return err
	}
	if err := a.wait(1, wcs); err != nil {
		return err
	}
	if err := b.wait(1, wcs); err != nil {
		return err
	}
	check := func(name string, ok bool) error {
		res := "ok"
		if !ok {
			res = "DATA MISMATCH"
		}
		fmt.Fprintf(w, "  %-28s %s\n", name, res)
		if !ok {
			return errors.New(name + ": data mismatch")
		}
		return nil
	}
	if err := check("SEND "+fmt.Sprint(len(msg))+" B", bytes.Equal(b.buf[:len(msg)], msg)); err != nil {
		return err
	}
	// RDMA WRITE 1 MiB.
	for i := 0; i < 1<<20; i++ {
		a.buf[i] = byte(i*13 + i>>10)
	}
	// WRITE_WITH_IMM: B learns from its CQ that the data has landed.
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 2}}); err != nil {
		return err
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGList: a.sge(0, 1<<20), RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey(), ImmData: 1}}); err != nil {
		return err
	}
	if err := a.wait(1, wcs); err != nil {
		return err
	}
	if err := b.wait(1, wcs); err != nil {
		return err
	}
	if err := check("RDMA WRITE 1 MiB", bytes.Equal(b.buf[1<<20:2<<20], a.buf[:1<<20])); err != nil {
		return err
	}
	// RDMA READ it back.
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: a.sge(2<<20, 1<<20), RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey()}}); err != nil {
		return err
	}
	if err := a.wait(1, wcs); err != nil {
		return err
	}
	if err := check("RDMA READ 1 MiB", bytes.Equal(a.buf[2<<20:3<<20], a.buf[:1<<20])); err != nil {
		return err
	}
	// Atomics on b.buf[4096]. B's PostRecv after its store orders the store
	// before the device's accesses; A's SEND after the atomics tells B they ran.
	binary.NativeEndian.PutUint64(b.buf[4096:], 40)
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 3}}); err != nil {
		return err
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 4, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: a.sge(3<<20, 8),
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), CompareAdd: 40, Swap: 100},
		{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(3<<20+8, 8),
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), CompareAdd: 23},
	}); err != nil {
		return err
	}
	if err := a.wait(2, wcs); err != nil {
		return err
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}}); err != nil {
		return err
	}
	if err := a.wait(1, wcs); err != nil {
		return err
	}
	if err := b.wait(1, wcs); err != nil {
		return err
	}
	if err := check("ATOMIC CMP_AND_SWP", binary.NativeEndian.Uint64(a.buf[3<<20:]) == 40); err != nil {
		return err
	}
	return check("ATOMIC FETCH_AND_ADD", binary.NativeEndian.Uint64(a.buf[3<<20+8:]) == 100 &&
		binary.NativeEndian.Uint64(b.buf[4096:]) == 123)
}

func demoSpeed(w io.Writer, a, b *demoEnd, dur time.Duration) error {
	bw, err := rdmaWriteBW(a, b, dur)
	if err != nil {
		return err
	}
	tbw, err := tcpBW(dur)
	if err != nil {
		return err
	}
	// Both latencies on one processor, as the latency tools measure
	// (toolkit.OneProc; GOMAXPROCS in the environment overrides it): a
	// completion then hands over to its poller without waking a thread.
	// TCP's half-RTT is the same on one processor or two.
	restore := toolkit.OneProc()
	lat, err := sendPingPong(a, b, dur)
	if err != nil {
		restore()
		return err
	}
	tlat, err := tcpPingPong(dur)
	restore()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%-34s %12s %12s %8s\n", "measurement", "softroce", "TCP", "ratio")
	fmt.Fprintf(w, "%-34s %9.2f GB/s %7.2f GB/s %7.2fx\n", "bandwidth (1 MiB RDMA WRITE)", bw/1e9, tbw/1e9, bw/tbw)
	fmt.Fprintf(w, "%-34s %9.2f us %9.2f us %7.2fx\n", "latency (64 B SEND half-RTT)",
		float64(lat)/1e3, float64(tlat)/1e3, float64(lat)/float64(tlat))
	return nil
}

// rdmaWriteBW streams 1 MiB RDMA WRITEs with up to 4 in flight.
func rdmaWriteBW(a, b *demoEnd, dur time.Duration) (float64, error) {
	const size = 1 << 20
	const depth = 4
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, size),
		RemoteAddr: b.mr.Addr() + 4<<20, RKey: b.mr.RKey()}}
	wcs := make([]verbs.WC, depth)
	start := time.Now()
	posted, done := 0, 0
	for time.Since(start) < dur || done < posted {
		for posted-done < depth && time.Since(start) < dur {
			if _, err := a.qp.PostSend(wr); err != nil {
				return 0, err
			}
			posted++
		}
		k := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("RDMA WRITE: %v", wc.Status)
			}
		}
		done += k
		if k == 0 {
			a.sleep(context.Background())
		}
		if time.Since(start) > dur+10*time.Second {
			return 0, errors.New("RDMA WRITE completions stalled")
		}
	}
	return float64(done*size) / time.Since(start).Seconds(), nil
}

// sendPingPong measures the 64-byte SEND half round trip.
func sendPingPong(a, b *demoEnd, dur time.Duration) (time.Duration, error) {
	const size = 64
	sa := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, size)}}
	sb := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: b.sge(0, size)}}
	ra := []verbs.RecvWR{{SGList: a.sge(4096, size)}}
	rb := []verbs.RecvWR{{SGList: b.sge(4096, size)}}
	for i := 0; i < 2; i++ {
		a.qp.PostRecv(ra)
		b.qp.PostRecv(rb)
	}
	stop := make(chan struct{})
	errc := make(chan error, 1)
	// One context for all of B's waits (a timer per wait would cost more
	// than the round trip it measures); stopping cancels it.
	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	// B echoes every message it receives.
	go func() {
		wcs := make([]verbs.WC, 4)
		for {
			k := b.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					errc <- fmt.Errorf("ping-pong (B): %v", wc.Status)
					return
				}
				if wc.Opcode == verbs.WCRecv {
					b.qp.PostRecv(rb)
					b.qp.PostSend(sb)
				}
			}
			if k == 0 {
				b.pollWait(bctx)
			}
			select {
			case <-stop:
				errc <- nil
				return
			default:
			}
		}
	}()
	wcs := make([]verbs.WC, 4)
	n := 0
	start := time.Now()
	var err error
	for time.Since(start) < dur && err == nil {
		a.qp.PostSend(sa)
		for got := false; !got && err == nil; {
			k := a.cq.Poll(wcs)
			if k == 0 {
				a.pollWait(context.Background())
			}
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					err = fmt.Errorf("ping-pong (A): %v", wc.Status)
				}
				if wc.Opcode == verbs.WCRecv {
					got = true
					a.qp.PostRecv(ra)
				}
			}
			if time.Since(start) > dur+10*time.Second {
				err = errors.New("ping-pong stalled")
			}
		}
		n++
	}
	el := time.Since(start)
	close(stop)
	bcancel()
	if e := <-errc; err == nil {
		err = e
	}
	if err != nil {
		return 0, err
	}
	return el / time.Duration(2*n), nil
}

func tcpPair() (net.Conn, net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	c2, err := ln.Accept()
	if err != nil {
		c1.Close()
		return nil, nil, err
	}
	return c1, c2, nil
}

// tcpBW streams 1 MiB writes over one TCP loopback connection.
func tcpBW(dur time.Duration) (float64, error) {
	c1, c2, err := tcpPair()
	if err != nil {
		return 0, err
	}
	defer c1.Close()
	defer c2.Close()
	got := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, c2)
		got <- n
	}()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for time.Since(start) < dur {
		if _, err := c1.Write(buf); err != nil {
			return 0, err
		}
	}
	c1.(*net.TCPConn).CloseWrite()
	n := <-got
	return float64(n) / time.Since(start).Seconds(), nil
}

// tcpPingPong measures the 64-byte TCP half round trip.
func tcpPingPong(dur time.Duration) (time.Duration, error) {
	c1, c2, err := tcpPair()
	if err != nil {
		return 0, err
	}
	defer c1.Close()
	defer c2.Close()
	go func() {
		b := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c2, b); err != nil {
				return
			}
			if _, err := c2.Write(b); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 64)
	n := 0
	start := time.Now()
	for time.Since(start) < dur {
		if _, err := c1.Write(b); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c1, b); err != nil {
			return 0, err
		}
		n++
	}
	return time.Since(start) / time.Duration(2*n), nil
}

// printStats prints the non-zero counters of a device.
func printStats(w io.Writer, st *verbs.Stats) {
	v := reflect.ValueOf(st).Elem()
	for i := 0; i < v.NumField(); i++ {
		if c, ok := v.Field(i).Addr().Interface().(*atomic.Uint64); ok {
			if n := c.Load(); n != 0 {
				fmt.Fprintf(w, "  %-16s %d\n", v.Type().Field(i).Name, n)
			}
		}
	}
}
