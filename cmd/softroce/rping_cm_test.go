package main

import (
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/wire"
)

// shortCMConfig makes the tools' CM give up after 3 × 100 ms.
func shortCMConfig(t *testing.T) {
	t.Helper()
	old := toolCMConfig
	toolCMConfig = &cm.Config{Timeout: 100 * time.Millisecond, MaxRetries: 2, TimeWait: 50 * time.Millisecond}
	t.Cleanup(func() { toolCMConfig = old })
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
	a1, _ := loopPair()
	srv := netip.MustParseAddr(a1)
	port := 20000 + rand.IntN(30000)
	var so, se syncBuf
	done := make(chan int, 1)
	go func() { done <- runRping([]string{"-s", "-P", "-a", a1, "-p", strconv.Itoa(port)}, &so, &se) }()
	var ag *cm.Agent
	waitUntil(t, 10*time.Second, "the server's CM agent", func() bool { ag = agentAt(srv); return ag != nil })
	// The first REQ the listener takes is one more unanswered connection.
	waitUntil(t, 10*time.Second, "the server to listen", func() bool { return probeListening(ag, srv, port) })
	mrs0 := ag.Device().Stats().MRs.Load()
	const n = 20 // and the probe's
	base := srv.As4()
	for i := range n {
		peer := netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(3 + i)})
		ag.Input(peer, spoofedREQ(peer, srv, uint16(port), uint32(1000+i)))
		time.Sleep(5 * time.Millisecond) // one at a time through the -P loop
	}
	// The CM gives up on each REP after 3 × 100 ms; then the connection's
	// goroutine, QP and MRs must be gone.
	waitUntil(t, 30*time.Second, "the unanswered connections to be freed", func() bool {
		return goroutinesIn("(*rcb).serveConn") == 0 && ag.Device().Stats().MRs.Load() == mrs0 && ag.IDs() == 0
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
	_, a2 := loopPair()
	var co, ce syncBuf
	if code := runRping([]string{"-c", "-a", a1, "-I", a2, "-p", strconv.Itoa(port), "-V", "-C", "5"}, &co, &ce); code != 0 {
		t.Fatalf("client after the spoofed REQs: exit %d\n%s", code, ce.String())
	}
}

// probeListening reports whether a REQ to port is taken (not rejected as
// having no listener): it sends one from a spoofed peer and watches the
// agent's REJ counter and IDs, then lets the CM clean it up.
func probeListening(ag *cm.Agent, srv netip.Addr, port int) bool {
	rej := ag.Stats().RejectsSent.Load()
	peer := netip.AddrFrom4([4]byte{srv.As4()[0], srv.As4()[1], srv.As4()[2], 254})
	ag.Input(peer, spoofedREQ(peer, srv, uint16(port), uint32(rand.IntN(1<<20)+1<<24)))
	if ag.Stats().RejectsSent.Load() != rej {
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
			a1, _ := loopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			opts := ",addr=" + a1 + ",port=" + port + ",count=20," + mode
			_, _, _, ccode, cout, cerr := runToolPair(t, runKrping, []string{"server,size=64" + opts}, []string{"client,size=4096" + opts})
			if ccode == 0 || !strings.Contains(cerr, "Completion wth error at client") || strings.Contains(cout, "delta sec") {
				t.Errorf("client exit %d\nstdout %q\nstderr %q", ccode, cout, cerr)
			}
		})
	}
}
