package rping

import (
	"context"
	"io"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/internal/spooftest"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// shortCMConfig makes the tools' CM give up after 3 × 100 ms.
func shortCMConfig(t *testing.T) {
	t.Helper()
	old := toolkit.CMConfig
	toolkit.CMConfig = &cm.Config{Timeout: 100 * time.Millisecond, MaxRetries: 2, TimeWait: 50 * time.Millisecond}
	t.Cleanup(func() { toolkit.CMConfig = old })
}

// spoofedREQ is a well-formed rdma_cm REQ for dst:port as if from peer
// (whose GSI QP will never answer the REP).
func spoofedREQ(peer, dst netip.Addr, port uint16, comm uint32) []byte {
	hdr := mad.CMAHeader{SrcPort: uint16(40000 + comm%20000), Src: peer, Dst: dst}
	pd, _ := hdr.Append(nil)
	g := func(a netip.Addr) (b [16]byte) { return netip.AddrFrom16(a.As16()).As16() }
	m := mad.REQ{Header: mad.NewHeader(uint64(comm)), LocalCommID: comm, ServiceID: mad.ServiceID(mad.PortSpaceTCP, port),
		LocalQPN: 0x100 + comm, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		TransportType: mad.TransportRC, StartingPSN: comm, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: wire.DefaultPKey,
		PathMTU: wire.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary:     mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: g(peer), RemoteGID: g(dst), HopLimit: 64, LocalACKTimeout: 19},
		PrivateData: pd}
	b, err := m.Append(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// sendSpoofed sends MAD m to srv's GSI QP (QP1) as if from peer, a loopback
// address with no device: a UD SEND over UDP whose IP source is peer, so the
// GRH the server's CM sees names peer, and its answers go nowhere.
func sendSpoofed(t *testing.T, peer, srv netip.Addr, m []byte) {
	t.Helper()
	ep, err := udp.Listen(netip.AddrPortFrom(peer, 0), udp.WithAnyPort(), udp.WithSendFromBound(),
		udp.WithoutGRO(), udp.WithBatchSize(1), udp.WithSocketBuffer(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1},
		DETH: wire.DETH{QKey: wire.GSIQKey, SrcQP: 1}, Payload: m}
	b := p.Append(nil)
	pkts := []link.Packet{{Buf: b, N: len(b), Dst: netip.AddrPortFrom(srv, wire.UDPPort)}}
	if _, err := ep.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
}

// agentAt returns the attached CM agent with address a.
func agentAt(a netip.Addr) *cm.Agent {
	for _, ag := range cm.Agents() {
		if ag.Addr() == a {
			return ag
		}
	}
	return nil
}

// goroutinesIn counts the goroutines whose stack contains fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	c := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			c++
		}
	}
	return c
}

// TestRpingPersistentUnansweredREQ: each REQ whose REP is never answered
// costs a -P server a connection goroutine, a QP and its buffers only
// until the CM gives up; they do not pile up.
func TestRpingPersistentUnansweredREQ(t *testing.T) {
	shortCMConfig(t)
	a1, _ := tooltest.LoopPair()
	srv := netip.MustParseAddr(a1)
	port := 20000 + rand.IntN(30000)
	var so, se syncBuf
	done := make(chan int, 1)
	go func() { done <- runRping([]string{"-s", "-P", "-a", a1, "-p", strconv.Itoa(port)}, &so, &se) }()
	var ag *cm.Agent
	waitUntil(t, 10*time.Second, "the server's CM agent", func() bool { ag = agentAt(srv); return ag != nil })
	// Before any connection: the probe's registers MRs too.
	mrs0 := ag.Device().Stats().MRs.Load()
	// The first REQ the listener takes is one more unanswered connection.
	waitUntil(t, 10*time.Second, "the server to listen", func() bool { return probeListening(t, ag, srv, port) })
	const n = 20 // and the probe's
	base := srv.As4()
	for i := range n {
		peer := netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(3 + i)})
		sendSpoofed(t, peer, srv, spoofedREQ(peer, srv, uint16(port), uint32(1000+i)))
		time.Sleep(5 * time.Millisecond) // one at a time through the -P loop
	}
	// The CM gives up on each REP after 3 × 100 ms; then the connection's
	// goroutine, QP and MRs must be gone.
	waitUntil(t, 30*time.Second, "the unanswered connections to be freed", func() bool {
		g, m, ids := goroutinesIn("(*rcb).serveConn"), ag.Device().Stats().MRs.Load(), ag.IDs()
		if g == 0 && m == mrs0 && ids == 0 {
			return true
		}
		t.Logf("%d connection goroutines, %d MRs (%d before), %d CM IDs", g, m, mrs0, ids)
		time.Sleep(time.Second)
		return false
	})
	if got := strings.Count(se.String(), "RDMA_CM_EVENT_UNREACHABLE, error -110"); got != n+1 {
		t.Errorf("%d UNREACHABLE lines, want %d:\n%s", got, n, se.String())
	}
	select {
	case code := <-done:
		t.Fatalf("the -P server exited (%d):\n%s", code, se.String())
	default:
	}
	// Still serving: a real client connects and pings.
	_, a2 := tooltest.LoopPair()
	var co, ce syncBuf
	if code := runRping([]string{"-c", "-a", a1, "-I", a2, "-p", strconv.Itoa(port), "-V", "-C", "5"}, &co, &ce); code != 0 {
		t.Fatalf("client after the spoofed REQs: exit %d\n%s", code, ce.String())
	}
}

// probeListening reports whether a REQ to port is taken (not rejected as
// having no listener): it sends one from a spoofed peer and watches the
// agent's REJ counter and IDs, then lets the CM clean it up.
func probeListening(t *testing.T, ag *cm.Agent, srv netip.Addr, port int) bool {
	st := ag.Stats()
	// Every MAD ends up handled, a duplicate or dropped.
	done := func() uint64 {
		return st.Handled.Load() + st.Duplicates.Load() + st.DropMalformed.Load() + st.DropUnknown.Load() +
			st.DropUnexpected.Load() + st.DropBacklog.Load()
	}
	rej, n := st.RejectsSent.Load(), done()
	peer := netip.AddrFrom4([4]byte{srv.As4()[0], srv.As4()[1], srv.As4()[2], 254})
	sendSpoofed(t, peer, srv, spoofedREQ(peer, srv, uint16(port), uint32(rand.IntN(1<<20)+1<<24)))
	waitUntil(t, 10*time.Second, "the server's CM to take the probe REQ", func() bool { return done() != n })
	if st.RejectsSent.Load() != rej {
		time.Sleep(20 * time.Millisecond)
		return false
	}
	return true
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timeout (%v) waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runToolPair runs a server and a client of tool (runRping or runKrping) in
// this process; the client is retried while the server is not listening.
func runToolPair(t *testing.T, run func([]string, io.Writer, io.Writer) int, sargs, cargs []string) (scode int, sout, serr string, ccode int, cout, cerr string) {
	t.Helper()
	var so, se syncBuf
	done := make(chan int, 1)
	go func() { done <- run(sargs, &so, &se) }()
	time.Sleep(100 * time.Millisecond)
	var co, ce syncBuf
	for try := 0; try < 100; try++ {
		co, ce = syncBuf{}, syncBuf{}
		if ccode = run(cargs, &co, &ce); ccode == 0 || !strings.Contains(ce.String(), "error 8\n") {
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	select {
	case scode = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not finish; client exit %d\n%s", ccode, ce.String())
	}
	return scode, so.String(), se.String(), ccode, co.String(), ce.String()
}

// TestKrpingFailedCompletionExit: a client WRITEs larger than the server's
// buffer (size= differs) complete with REMOTE_ACCESS_ERROR: the client
// prints the error, no result line, and exits non-zero.
func TestKrpingFailedCompletionExit(t *testing.T) {
	shortCMConfig(t)
	for _, mode := range []string{"bw", "wlat"} {
		t.Run(mode, func(t *testing.T) {
			a1, _ := tooltest.LoopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			opts := ",addr=" + a1 + ",port=" + port + ",count=20," + mode
			_, _, _, ccode, cout, cerr := runToolPair(t, runKrping, []string{"server,size=64" + opts}, []string{"client,size=4096" + opts})
			if ccode == 0 || !strings.Contains(cerr, "Completion wth error at client") || strings.Contains(cout, "delta sec") {
				t.Errorf("client exit %d\nstdout %q\nstderr %q", ccode, cout, cerr)
			}
		})
	}
}

// TestRpingPeerKilled: the peer of an rping or krping run is killed
// (SIGKILL: no DREQ) mid-run; the survivor, in this process, exits
// non-zero with a line saying the connection is lost, within its budget:
// the keepalive interval plus the transport's retries (shortened here:
// keepalive 300 ms, ACK timeout 2^12 × 4.096 µs ≈ 17 ms, 7 retries).
func TestRpingPeerKilled(t *testing.T) {
	bin := tooltest.Binary(t)
	shortCMConfig(t)
	oldKA, oldTO := keepalive, toolACKTimeout
	keepalive, toolACKTimeout = 300*time.Millisecond, 12
	t.Cleanup(func() { keepalive, toolACKTimeout = oldKA, oldTO })
	for _, tc := range []struct {
		name     string
		survivor string // "server" or "client"
		run      func([]string, io.Writer, io.Writer) int
		server   func(a1, port string) []string
		client   func(a1, a2, port string) []string
		progress string // a line that shows the test runs
	}{
		{"rping-server-survives", "server", runRping,
			func(a1, port string) []string { return []string{"-s", "-a", a1, "-p", port, "-v"} },
			func(a1, a2, port string) []string {
				return []string{"-c", "-a", a1, "-I", a2, "-p", port, "-v", "-C", "0"}
			},
			"ping data: rdma-ping-20:"},
		{"rping-client-survives", "client", runRping,
			func(a1, port string) []string { return []string{"-s", "-a", a1, "-p", port, "-v"} },
			func(a1, a2, port string) []string {
				return []string{"-c", "-a", a1, "-I", a2, "-p", port, "-v", "-C", "0"}
			},
			"ping data: rdma-ping-20:"},
		{"krping-wlat-server-survives", "server", runKrping,
			func(a1, port string) []string {
				return []string{"server,addr=" + a1 + ",port=" + port + ",wlat,count=100000000"}
			},
			func(a1, _, port string) []string {
				return []string{"client,addr=" + a1 + ",port=" + port + ",wlat,count=100000000"}
			},
			""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tooltest.RaceEnabled && strings.Contains(tc.name, "wlat") {
				t.Skip("wlat spins on memory the engine writes: the race detector reports it")
			}
			a1, a2 := tooltest.LoopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			tool := "rping"
			if tc.name[0] == 'k' {
				tool = "krping"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var so, se syncBuf
			done := make(chan int, 1)
			var peer *exec.Cmd
			var pout syncBuf
			if tc.survivor == "server" {
				go func() { done <- tc.run(tc.server(a1, port), &so, &se) }()
				time.Sleep(200 * time.Millisecond)
				for try := 0; ; try++ {
					pout = syncBuf{}
					peer = exec.CommandContext(ctx, bin, append([]string{tool}, tc.client(a1, a2, port)...)...)
					peer.Env = tooltest.Env(t)
					peer.Stdout, peer.Stderr = &pout, &pout
					if err := peer.Start(); err != nil {
						t.Fatal(err)
					}
					time.Sleep(500 * time.Millisecond)
					if !strings.Contains(pout.String(), "error 8") || try == 50 {
						break
					}
					peer.Wait()
				}
			} else {
				peer = exec.CommandContext(ctx, bin, append([]string{tool}, tc.server(a1, port)...)...)
				peer.Env = tooltest.Env(t)
				peer.Stdout, peer.Stderr = &pout, &pout
				if err := peer.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
				go func() {
					code := 0
					for try := 0; try < 50; try++ {
						// Output of refused tries goes to so/se too; only
						// the last try's matters, and "error 8" tells them.
						n := len(se.String())
						if code = tc.run(tc.client(a1, a2, port), &so, &se); !strings.Contains(se.String()[n:], "error 8\n") {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					done <- code
				}()
			}
			// Let the test run a while, then kill the peer.
			waitUntil(t, 30*time.Second, "the test to run", func() bool {
				if tc.progress == "" {
					time.Sleep(time.Second)
					return true
				}
				return strings.Contains(so.String()+pout.String(), tc.progress)
			})
			if err := peer.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			peer.Wait()
			killed := time.Now()
			select {
			case code := <-done:
				if code == 0 || !strings.Contains(se.String(), "connection lost: the peer stopped answering") {
					t.Errorf("%s exit %d after the peer was killed; stderr:\n%s", tc.survivor, code, se.String())
				}
				t.Logf("%s exited %d, %v after the kill:\n%s", tc.survivor, code, time.Since(killed).Round(time.Millisecond), se.String())
			case <-ctx.Done():
				t.Fatalf("%s still running %v after its peer was killed; stderr:\n%s", tc.survivor, time.Since(killed), se.String())
			}
		})
	}
}

// TestRpingKeepalive: an rping server waits for the client's first
// advertisement with nothing outstanding; the client's device vanishes
// (no DREQ, no ACKs). Only the keepalive can tell: the server must say
// the connection is lost and exit non-zero.
func TestRpingKeepalive(t *testing.T) {
	shortCMConfig(t)
	oldKA, oldTO := keepalive, toolACKTimeout
	keepalive, toolACKTimeout = 300*time.Millisecond, 12
	t.Cleanup(func() { keepalive, toolACKTimeout = oldKA, oldTO })
	a1, a2 := tooltest.LoopPair()
	port := 20000 + rand.IntN(30000)
	var so, se syncBuf
	done := make(chan int, 1)
	go func() { done <- runRping([]string{"-s", "-a", a1, "-p", strconv.Itoa(port)}, &so, &se) }()
	d, err := openCMDevice(netip.MustParseAddr(a2), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *cm.Conn
	for try := 0; ; try++ {
		c, err = cm.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(a1), uint16(port)).String(), &cm.Options{Src: netip.MustParseAddr(a2)})
		if err == nil || try == 50 || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = c
	time.Sleep(100 * time.Millisecond)
	d.Close() // the client vanishes: no DREQ, no more ACKs
	select {
	case code := <-done:
		if code == 0 || !strings.Contains(se.String(), "a keepalive RDMA WRITE got no ACK") {
			t.Errorf("server exit %d; stderr:\n%s", code, se.String())
		}
	case <-ctx.Done():
		t.Fatalf("the server still waits for a vanished client; stderr:\n%s", se.String())
	}
}

// TestRdmaCMNoAnswer: a client whose REQ nobody answers (no device at the
// address) or whose address does not resolve fails as the real tools do,
// says what it waits for meanwhile, and exits non-zero, in a bounded time
// (the CM here: 3 × 100 ms; the real one 16 × 6.144 s).
func TestRdmaCMNoAnswer(t *testing.T) {
	shortCMConfig(t)
	noResolve := func(ctx context.Context, src, dst netip.Addr) error {
		if dst.As4()[3] == 99 {
			return syscall.ETIMEDOUT // as ARP with nobody answering, sooner
		}
		return nil
	}
	toolkit.CMConfig.Resolve = noResolve
	a1, a2 := tooltest.LoopPair()
	nobody := strings.TrimSuffix(a1, ".1") + ".9" // no device: the REQ goes unanswered
	unres := strings.TrimSuffix(a1, ".1") + ".99"
	wait := "no answer yet from " + nobody + ":7174: waiting for its connection manager to answer the connection request"
	for _, tc := range []struct {
		name string
		run  func() (int, string)
		want []string
	}{
		{"rping-unreachable", func() (int, string) {
			var o, e syncBuf
			return runRping([]string{"-c", "-a", nobody, "-I", a2, "-C", "1"}, &o, &e), e.String()
		}, []string{"rping: " + wait, "cma event RDMA_CM_EVENT_UNREACHABLE, error -110\nwait for CONNECTED state 4\nconnect error -1\n"}},
		{"krping-unreachable", func() (int, string) {
			var o, e syncBuf
			return runKrping([]string{"client,addr=" + nobody + ",port=7174"}, &o, &e), e.String()
		}, []string{"krping: " + wait, "krping: cma event 7, error -110\n"}},
		{"rping-addr-error", func() (int, string) {
			var o, e syncBuf
			return runRping([]string{"-c", "-a", unres, "-I", a2, "-C", "1"}, &o, &e), e.String()
		}, []string{"cma event RDMA_CM_EVENT_ADDR_ERROR, error -110\n"}},
		{"write_bw-R-unreachable", func() (int, string) {
			var o, e syncBuf
			return run([]string{"write_bw", "-R", "-d", a2, "-p", "18515", nobody}, &o, &e), e.String()
		}, []string{" No answer yet from " + nobody + ":18515: waiting for its connection manager",
			"Unexpected CM event bl blka 7\n Unable to perform rdma_client function\n Unable to init the socket connection ("}},
		{"write_bw-R-addr-error", func() (int, string) {
			var o, e syncBuf
			return run([]string{"write_bw", "-R", "-d", a2, "-p", "18515", unres}, &o, &e), e.String()
		}, []string{"Received 10 times ADDR_ERROR\n Unable to perform rdma_client function\n Unable to init the socket connection ("}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var code int
			var stderr string
			go func() { code, stderr = tc.run(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("still running after 30 s")
			}
			if code == 0 {
				t.Errorf("exit 0")
			}
			// rping and krping exit 255 on a failed run, as rdma-core's rping.
			if (strings.HasPrefix(tc.name, "rping") || strings.HasPrefix(tc.name, "krping")) && code != 255 {
				t.Errorf("exit %d, want 255 (rping's -1)", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestRpingPersistentHalfOpenBounds: under a flood of REQs that never
// complete, a -P server's CM keeps at most maxHalfOpen of them waiting
// for their RTU, dropping the oldest for a newer one; the server's
// connections not established yet stay within maxPending, and all of
// them are released once the flood stops, before the CM's own budget (16 ×
// 100 ms here) runs out.
func TestRpingPersistentHalfOpenBounds(t *testing.T) {
	shortCMConfig(t)
	toolkit.CMConfig.MaxRetries = 15
	a1, _ := tooltest.LoopPair()
	srv := netip.MustParseAddr(a1)
	port := 20000 + rand.IntN(30000)
	var so, se syncBuf
	done := make(chan int, 1)
	go func() { done <- runRping([]string{"-s", "-P", "-a", a1, "-p", strconv.Itoa(port)}, &so, &se) }()
	var ag *cm.Agent
	waitUntil(t, 10*time.Second, "the server's CM agent", func() bool { ag = agentAt(srv); return ag != nil })
	mrs0 := ag.Device().Stats().MRs.Load() // before any connection
	waitUntil(t, 10*time.Second, "the server to listen", func() bool { return probeListening(t, ag, srv, port) })
	base := srv.As4()
	most := 0
	for i := range 300 {
		peer := netip.AddrFrom4([4]byte{base[0], base[1], byte(i >> 8), byte(i)})
		sendSpoofed(t, peer, srv, spoofedREQ(peer, srv, uint16(port), uint32(5000+i)))
		if i%10 == 0 {
			most = max(most, goroutinesIn("(*rcb).serveConn"))
		}
		time.Sleep(time.Millisecond)
	}
	if most > maxPending {
		t.Errorf("%d connections not established at once, bound %d", most, maxPending)
	}
	if ag.Stats().HalfOpenEvicted.Load() == 0 {
		t.Errorf("the CM dropped no half-open connection for a newer one (bound %d)", maxHalfOpen)
	}
	waitUntil(t, 30*time.Second, "the half-open connections to be dropped", func() bool {
		return goroutinesIn("(*rcb).serveConn") == 0 && ag.Device().Stats().MRs.Load() == mrs0
	})
	t.Logf("at most %d connections not established; %d half-open dropped for newer ones, %d REJs sent",
		most, ag.Stats().HalfOpenEvicted.Load(), ag.Stats().RejectsSent.Load())
	select {
	case code := <-done:
		t.Fatalf("the -P server exited (%d)", code)
	default:
	}
}

// TestRpingPersistentSpoofedFlood: under a sustained flood of spoofed REQs
// (valid MADs over loopback UDP from addresses that never answer the REP),
// 100 and 1,000 a second, a real rping client gets through to a -P server
// within 2 s, every time, with Linux's CM timing (a REQ dropped would be
// resent after 6.1 s; a full server used to reject it, REJ 28); the
// server's connections not established yet stay within maxPending.
func TestRpingPersistentSpoofedFlood(t *testing.T) {
	rates := []int{100, 1000}
	if tooltest.RaceEnabled {
		rates = []int{100, 300} // the race detector slows the CM's handling of each MAD several times over
	}
	for _, rate := range rates {
		t.Run(strconv.Itoa(rate), func(t *testing.T) {
			a1, a2 := tooltest.LoopPair()
			srv := netip.MustParseAddr(a1)
			port := 20000 + rand.IntN(30000)
			var so, se syncBuf
			done := make(chan int, 1)
			go func() { done <- runRping([]string{"-s", "-P", "-a", a1, "-p", strconv.Itoa(port)}, &so, &se) }()
			var ag *cm.Agent
			waitUntil(t, 10*time.Second, "the server's CM agent", func() bool { ag = agentAt(srv); return ag != nil })
			waitUntil(t, 10*time.Second, "the server to listen", func() bool { return probeListening(t, ag, srv, port) })
			base := srv.As4()
			var peers []netip.Addr
			for i := range 32 {
				peers = append(peers, netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(10 + i)}))
			}
			f, err := spooftest.New(srv, peers)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx, cancel := context.WithCancel(context.Background())
			flooding := make(chan struct{})
			go func() {
				defer close(flooding)
				f.Run(ctx, rate, func(peer netip.Addr, i int) []byte {
					return spoofedREQ(peer, srv, uint16(port), uint32(0x100000+i))
				})
			}()
			defer func() { cancel(); <-flooding }()
			// Past the half-open bound, and a second of flood at least.
			waitUntil(t, 10*time.Second, "the flood to fill the server", func() bool { return f.Sent() >= max(2*maxHalfOpen, rate) })
			st := ag.Stats()
			for i := range 3 {
				t0 := time.Now()
				var co, ce syncBuf
				cdone := make(chan int, 1)
				go func() {
					cdone <- runRping([]string{"-c", "-a", a1, "-I", a2, "-p", strconv.Itoa(port), "-V", "-C", "1"}, &co, &ce)
				}()
				select {
				case code := <-cdone:
					if code != 0 {
						t.Fatalf("client %d under %d spoofed REQ/s: exit %d after %v (half-open dropped %d, backlog drops %d)\n%s",
							i, rate, code, time.Since(t0), st.HalfOpenEvicted.Load(), st.DropBacklog.Load(), ce.String())
					}
				case <-time.After(2 * time.Second):
					t.Fatalf("client %d under %d spoofed REQ/s: not done after 2 s (%d sent, half-open dropped %d, backlog drops %d)\n%s",
						i, rate, f.Sent(), st.HalfOpenEvicted.Load(), st.DropBacklog.Load(), ce.String())
				}
				g := goroutinesIn("(*rcb).serveConn")
				t.Logf("client %d: %v (%d spoofed REQs sent, %d server connections)", i, time.Since(t0).Round(time.Millisecond), f.Sent(), g)
				if g > maxPending+1 { // and the client's, established
					t.Errorf("%d server connections, bound %d", g, maxPending)
				}
			}
			if st.HalfOpenEvicted.Load() == 0 {
				t.Errorf("the CM dropped no half-open connection for a newer one")
			}
			t.Logf("%d spoofed REQs: %d half-open dropped for newer ones, %d REPs under pressure, %d dropped (backlog)",
				f.Sent(), st.HalfOpenEvicted.Load(), st.HalfOpenShortREPs.Load(), st.DropBacklog.Load())
			select {
			case code := <-done:
				t.Fatalf("the -P server exited (%d)", code)
			default:
			}
		})
	}
}
