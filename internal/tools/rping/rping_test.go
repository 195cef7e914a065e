package rping

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

func TestParseRpingArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		want func(o *options) bool
	}{
		{[]string{"-s"}, true, func(o *options) bool { return o.server == 1 && o.port == 7174 && o.size == 64 && o.count == 0 }},
		{[]string{"-c", "-a", "10.0.0.1", "-vVd", "-C10", "-S", "100", "-p", "9999", "-q"}, true, func(o *options) bool {
			return o.server == 0 && o.addr.String() == "10.0.0.1" && o.verbose && o.validate && o.debug && o.count == 10 &&
				o.size == 100 && o.port == 9999 && o.selfQP
		}},
		{[]string{"-s", "-P", "-a", "::0"}, true, func(o *options) bool { return o.persistent && o.addr.IsUnspecified() }},
		{[]string{"-c"}, false, nil},                          // client without -a
		{[]string{"-v"}, false, nil},                          // neither -s nor -c
		{[]string{"-s", "-S", "10"}, false, nil},              // below RPING_MIN_BUFSIZE
		{[]string{"-s", "-S", "65536"}, false, nil},           // above RPING_BUFSIZE-1
		{[]string{"-s", "-C", "-1"}, false, nil},              // negative count
		{[]string{"-s", "-x"}, false, nil},                    // unknown option
		{[]string{"-c", "-a", "10.0.0.1", "-p"}, false, nil},  // missing value
		{[]string{"-c", "-a", "not an address!"}, false, nil}, // bad address
	} {
		o, err := parseRpingArgs(tc.args, io.Discard)
		if (err == nil) != tc.ok || (tc.ok && !tc.want(o)) {
			t.Errorf("%q: %+v, %v", tc.args, o, err)
		}
	}
}

func TestParseKrpingOpts(t *testing.T) {
	o, err := parseKrpingOpts("client,addr=192.168.11.22,port=9999,count=1,size=128,validate,verbose,bw,duplex,txdepth=32,poll")
	if err != nil {
		t.Fatal(err)
	}
	want := options{server: 0, port: 9999, count: 1, size: 128, validate: true, verbose: true, bw: true, duplex: true,
		txdepth: 32, poll: true, prefix: "krping: "}
	want.addr = netip.MustParseAddr("192.168.11.22")
	if *o != want {
		t.Errorf("got %+v", *o)
	}
	for _, bad := range []string{
		"addr=1.2.3.4,port=1",                 // neither server nor client
		"server,port=1",                       // no addr
		"server,addr=1.2.3.4",                 // no port
		"client,addr=1.2.3.4,port=1,wlat,bw",  // two tests
		"client,addr=1.2.3.4,port=1,size=0",   // size
		"client,addr=1.2.3.4,port=1,bogus",    // unknown
		"client,addr=1.2.3.4,port=1,count=x",  // not a number
		"client,addr=1.2.3.4,port=1,count=-2", // negative
	} {
		if _, err := parseKrpingOpts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// wlat/rlat/bw default to 1000 iterations, ping mode to forever (0).
	o, _ = parseKrpingOpts("client,addr=1.2.3.4,port=1,rlat")
	p, _ := parseKrpingOpts("client,addr=1.2.3.4,port=1")
	if o.count != 1000 || p.count != 0 {
		t.Errorf("default counts %d %d", o.count, p.count)
	}
}

// expectLines is what rping -v prints for pings 0..n-1 of size bytes.
func expectLines(prefix string, n, size int) string {
	var b strings.Builder
	for i := range n {
		buf := make([]byte, size)
		s := fmt.Sprintf("rdma-ping-%d: ", i)
		c := byte('A' + i%58)
		copy(buf, s)
		for j := len(s); j < size; j++ {
			buf[j] = c
			if c++; c > 'z' {
				c = 'A'
			}
		}
		fmt.Fprintf(&b, "%s%s\n", prefix, buf[:size-1])
	}
	return b.String()
}

func TestRpingLinesMatchCapture(t *testing.T) {
	// The client output of the rping capture (../shared/captures/README.md).
	want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n" +
		"ping data: rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs\n" +
		"ping data: rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst\n"
	if got := expectLines("ping data: ", 3, 64); got != want {
		t.Fatalf("got\n%s", got)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRpingInProcess runs an rping server and client in this process, on
// two loopback addresses, in the normal and the -q (self-managed QP) modes.
func TestRpingInProcess(t *testing.T) {
	for _, q := range []bool{false, true} {
		t.Run(fmt.Sprintf("q=%v", q), func(t *testing.T) {
			a1, a2 := tooltest.LoopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			var so, se syncBuf
			sargs := []string{"-s", "-a", a1, "-p", port, "-v", "-S", "100"}
			cargs := []string{"-c", "-a", a1, "-I", a2, "-p", port, "-v", "-V", "-C", "20", "-S", "100"}
			if q {
				sargs, cargs = append(sargs, "-q"), append(cargs, "-q")
			}
			done := make(chan int, 1)
			go func() { done <- runRping(sargs, &so, &se) }()
			time.Sleep(100 * time.Millisecond) // see runPair
			var co, ce syncBuf
			code := -1
			for try := 0; try < 50; try++ { // until the server listens
				co, ce = syncBuf{}, syncBuf{}
				if code = runRping(cargs, &co, &ce); code == 0 || !strings.Contains(ce.String(), "REJECTED, error 8") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			var scode int
			select {
			case scode = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("server did not finish")
			}
			if code != 0 || scode != 0 {
				t.Fatalf("client %d\n%s%s\nserver %d\n%s%s", code, co.String(), ce.String(), scode, so.String(), se.String())
			}
			if got, want := co.String(), expectLines("ping data: ", 20, 100); got != want {
				t.Errorf("client output:\n%s\nwant\n%s", got, want)
			}
			if got, want := so.String(), expectLines("server ping data: ", 20, 100); got != want {
				t.Errorf("server output:\n%s\nwant\n%s", got, want)
			}
			if !strings.Contains(se.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n") {
				t.Errorf("server stderr %q", se.String())
			}
			if ce.String() != "client DISCONNECT EVENT...\n" {
				t.Errorf("client stderr %q", ce.String())
			}
		})
	}
}

func TestRpingNoServer(t *testing.T) {
	a1, a2 := tooltest.LoopPair()
	var ss, se syncBuf
	// A device must exist at a1 for the REJ: an rping server on another port.
	done := make(chan int, 1)
	go func() { done <- runRping([]string{"-s", "-a", a1, "-p", "7000"}, &ss, &se) }()
	time.Sleep(200 * time.Millisecond)
	var co, ce syncBuf
	start := time.Now()
	code := runRping([]string{"-c", "-a", a1, "-I", a2, "-p", "7001", "-C", "1"}, &co, &ce)
	if code == 0 || !strings.Contains(ce.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8\n") ||
		!strings.Contains(ce.String(), "wait for CONNECTED state 4\n") || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d after %v: %q", code, time.Since(start), ce.String())
	}
	// Stop the server: connect once to its port.
	var c2o, c2e syncBuf
	runRping([]string{"-c", "-a", a1, "-I", a2, "-p", "7000", "-C", "1"}, &c2o, &c2e)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("server did not finish")
	}
}

// runPair runs server and client processes (argv with the binary); the
// client is retried while the server is not listening yet.
func runPair(t *testing.T, timeout time.Duration, server, client []string) (tooltest.ProcResult, tooltest.ProcResult) {
	t.Helper()
	return pairEnv(t, timeout, tooltest.Env(t), server, client)
}

// pairEnv is runPair in environment env (tooltest.Env, with links).
func pairEnv(t *testing.T, timeout time.Duration, env, server, client []string) (tooltest.ProcResult, tooltest.ProcResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	waitS := tooltest.StartProc(ctx, t, env, server)
	// A REQ sent before the server's device is up is lost and resent only
	// after the CM response timeout (4.3 s): give the server a moment.
	time.Sleep(200 * time.Millisecond)
	var c tooltest.ProcResult
	for try := 0; try < 100; try++ {
		c = tooltest.StartProc(ctx, t, env, client)()
		if c.Code == 0 || !strings.Contains(c.Stderr, "error 8\n") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := waitS()
	if ctx.Err() != nil {
		t.Errorf("timed out after %v", timeout)
	}
	return s, c
}

// TestRpingBinary: softroce rping -V -C 100 between two processes.
func TestRpingBinary(t *testing.T) {
	bin := tooltest.Binary(t)
	a1, a2 := tooltest.LoopPair()
	port := strconv.Itoa(20000 + rand.IntN(30000))
	s, c := runPair(t, 60*time.Second, []string{bin, "rping", "-s", "-a", a1, "-p", port, "-v"},
		[]string{bin, "rping", "-c", "-a", a1, "-I", a2, "-p", port, "-V", "-v", "-C", "100"})
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("server: %v\nclient: %v", s, c)
	}
	if c.Stdout != expectLines("ping data: ", 100, 64) || s.Stdout != expectLines("server ping data: ", 100, 64) {
		t.Errorf("outputs differ from rping's:\nserver: %v\nclient: %v", s, c)
	}
}

// TestRpingPersistent: a -P server serves several clients in turn.
func TestRpingPersistent(t *testing.T) {
	bin := tooltest.Binary(t)
	a1, a2 := tooltest.LoopPair()
	port := strconv.Itoa(20000 + rand.IntN(30000))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := tooltest.Env(t)
	srv := exec.CommandContext(ctx, bin, "rping", "-s", "-P", "-a", a1, "-p", port)
	srv.Env = env
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	if !tooltest.WaitDevice(a1, 10*time.Second) {
		t.Fatal("the server's device did not come up in 10 s")
	}
	for i := range 3 {
		var c tooltest.ProcResult
		for try := 0; try < 100; try++ {
			c = tooltest.StartProc(ctx, t, env, []string{bin, "rping", "-c", "-a", a1, "-I", a2, "-p", port, "-V", "-C", "10"})()
			if c.Code == 0 || !strings.Contains(c.Stderr, "error 8\n") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if c.Code != 0 {
			t.Fatalf("client %d: %v", i, c)
		}
	}
}

// TestKrpingBinary runs softroce krping in each mode between two processes.
func TestKrpingBinary(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, mode := range []string{"", ",wlat", ",rlat", ",rlat,poll", ",bw", ",bw,duplex,txdepth=8"} {
		name := strings.TrimPrefix(mode, ",")
		if name == "" {
			name = "ping"
		}
		t.Run(name, func(t *testing.T) {
			a1, _ := tooltest.LoopPair()
			port := strconv.Itoa(20000 + rand.IntN(30000))
			opts := ",addr=" + a1 + ",port=" + port + ",count=50,size=256" + mode
			s, c := runPair(t, 60*time.Second, []string{bin, "krping", "server,verbose" + opts},
				[]string{bin, "krping", "client,validate,verbose" + opts})
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			perf := `^krping: delta sec \d+ delta usec \d+ iter 50 size 256`
			cyc := perf + ` cycle_iters 50 sum_post \d+ sum_poll \d+ sum_last_poll \d+\n$`
			switch mode {
			case "":
				if c.Stdout != expectLines("krping: ping data: ", 50, 256) || s.Stdout != expectLines("krping: server ping data: ", 50, 256) {
					t.Errorf("ping output:\nserver: %v\nclient: %v", s, c)
				}
			case ",wlat":
				tooltest.MustMatch(t, "client", c, cyc)
				tooltest.MustMatch(t, "server", s, cyc)
			case ",rlat", ",rlat,poll":
				tooltest.MustMatch(t, "client", c, perf+`\n$`)
			case ",bw":
				tooltest.MustMatch(t, "client", c, cyc)
			default:
				// Both write; the side that finishes first disconnects,
				// which may cut the other's last writes short (as krping).
				tooltest.MustMatch(t, "client", c, cyc)
				if !strings.Contains(s.Stderr, "peer disconnected before the test ended") {
					tooltest.MustMatch(t, "server", s, cyc)
				}
			}
			if !strings.Contains(c.Stderr, "krping: DISCONNECT EVENT...") {
				t.Errorf("client stderr %q", c.Stderr)
			}
		})
	}
}

// TestRpingCrossNamespace: rping -V -C 100 between two network namespaces
// joined by a veth pair, and krping in bw mode.
func TestRpingCrossNamespace(t *testing.T) {
	bin := tooltest.Binary(t)
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) is not installed")
	}
	ns1, ns2, a1, _ := tooltest.NetnsPair(t)
	port := strconv.Itoa(20000 + rand.IntN(30000))
	s, c := runPair(t, 60*time.Second, []string{"ip", "netns", "exec", ns1, bin, "rping", "-s", "-a", a1, "-p", port, "-v"},
		[]string{"ip", "netns", "exec", ns2, bin, "rping", "-c", "-a", a1, "-p", port, "-V", "-v", "-C", "100"})
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("server (%s): %v\nclient (%s): %v", ns1, s, ns2, c)
	}
	if c.Stdout != expectLines("ping data: ", 100, 64) {
		t.Errorf("client output %v", c)
	}
	opts := ",addr=" + a1 + ",port=" + port + ",count=100,size=4096,bw"
	s, c = runPair(t, 60*time.Second, []string{"ip", "netns", "exec", ns1, bin, "krping", "server" + opts},
		[]string{"ip", "netns", "exec", ns2, bin, "krping", "client" + opts})
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("krping server: %v\nclient: %v", s, c)
	}
	tooltest.MustMatch(t, "client", c, `^krping: delta sec \d+ delta usec \d+ iter 100 size 4096 `)
}
