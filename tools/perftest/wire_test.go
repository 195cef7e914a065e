package perftest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/wire"
)

// The TCP side channel of each tool, as captured between the real tools
// over kernel rxe (../shared/captures, perftest 4.5+0.17 and rdma-core
// 44.0): the bytes of each run of data in one direction, client (c) or
// server (s), in order. Computed from the pcaps' TCP payloads.
var capturedSideChannel = map[string]string{
	"rc_pingpong":  "c52 s52 c5",
	"uc_pingpong":  "c52 s52 c5",
	"ud_pingpong":  "c52 s52 c5",
	"srq_pingpong": "c13312 s13312 c5",
	"write_bw":     "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c8 s8 c8 s8 c8 s8 c8 s8 c8 s8 c108 s113 c5",
	"read_bw":      "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c8 s8 c8 s8 c8 s8 c8 s8 c8 s8 c108 s108 c5 s5",
	"atomic_bw":    "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c8 s8 c8 s8 c8 s8 c8 s8 c8 s8 c108 s108 c5 s5",
	"send_bw":      "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c108 s108 c5 s5",
	"send_lat":     "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c108 s113 c5",
	"read_lat":     "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c108 s113 c5",
	"atomic_lat":   "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108 c108 s108 c5 s5",
	"write_lat":    "c16 s16 c4 s4 c4 s4 c2 s2 c108 s108 c108 s108 c108 s108 c108 s108",
}

// sideChannelRecorder is a TCP proxy that records the runs of bytes in
// each direction.
type sideChannelRecorder struct {
	mu   sync.Mutex
	runs []scRun
}

type scRun struct {
	client bool
	n      int
}

func (r *sideChannelRecorder) add(client bool, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := len(r.runs); k > 0 && r.runs[k-1].client == client {
		r.runs[k-1].n += n
		return
	}
	r.runs = append(r.runs, scRun{client, n})
}

// normalized splits a run list at its last big client message (an address:
// 52 bytes or more): the runs before it must match exactly; after it only
// the byte totals per direction are compared, because both sides write
// their closing "done" without waiting for each other.
func normalizedRuns(runs []scRun) (prefix string, tailC, tailS int) {
	cut := len(runs)
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].client && runs[i].n >= 52 {
			cut = i
			break
		}
	}
	var b []string
	for _, r := range runs[:cut] {
		b = append(b, fmt.Sprintf("%s%d", map[bool]string{true: "c", false: "s"}[r.client], r.n))
	}
	for _, r := range runs[cut:] {
		if r.client {
			tailC += r.n
		} else {
			tailS += r.n
		}
	}
	return strings.Join(b, " "), tailC, tailS
}

func parseRuns(s string) []scRun {
	var out []scRun
	for _, f := range strings.Fields(s) {
		n, _ := strconv.Atoi(f[1:])
		out = append(out, scRun{f[0] == 'c', n})
	}
	return out
}

// proxy listens on a free port and forwards one connection to target.
func (r *sideChannelRecorder) proxy(t *testing.T, target int) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		var s net.Conn
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s, err = net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(target))); err == nil {
				break
			}
		}
		if s == nil {
			c.Close()
			return
		}
		pipe := func(dst, src net.Conn, client bool) {
			buf := make([]byte, 65536)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					r.add(client, n)
					dst.Write(buf[:n])
				}
				if err != nil {
					if err != io.EOF {
						dst.Close()
					} else if tc, ok := dst.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
					return
				}
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); pipe(s, c, true) }()
		go func() { defer wg.Done(); pipe(c, s, false) }()
		wg.Wait()
		c.Close()
		s.Close()
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSideChannelMatchesCapture runs each tool through a recording proxy
// and checks that its TCP exchange has the shape of the real tools'
// (message sizes, order and count), the property that lets a softroce tool
// face the real one.
func TestSideChannelMatchesCapture(t *testing.T) {
	bin := tooltest.Binary(t)
	args := map[string][]string{
		"rc_pingpong": {"-n", "5", "-s", "64"}, "uc_pingpong": {"-n", "5", "-s", "64"}, "ud_pingpong": {"-n", "5", "-s", "64"},
		"srq_pingpong": {"-n", "5", "-q", "4", "-s", "256"},
		"write_bw":     {"-n", "20", "-s", "4096"}, "read_bw": {"-n", "20", "-s", "4096"}, "atomic_bw": {"-n", "20"},
		"send_bw": {"-n", "20", "-s", "2048"}, "send_lat": {"-n", "20", "-s", "64"}, "read_lat": {"-n", "20", "-s", "64"},
		"atomic_lat": {"-n", "20", "-A", "CMP_AND_SWAP"}, "write_lat": {"-n", "20", "-s", "64"},
	}
	for tool, want := range capturedSideChannel {
		t.Run(tool, func(t *testing.T) {
			sa, ca := tooltest.LoopPair()
			sport := tooltest.FreeTCPPort(t)
			var rec sideChannelRecorder
			pport := rec.proxy(t, sport)
			s, c := tooltest.RunPair(t, 60*time.Second,
				append([]string{bin, tool, "-d", sa, "-p", strconv.Itoa(sport)}, args[tool]...),
				append(append([]string{bin, tool, "-d", ca, "-p", strconv.Itoa(pport)}, args[tool]...), "127.0.0.1"))
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			time.Sleep(50 * time.Millisecond) // let the proxy drain
			rec.mu.Lock()
			defer rec.mu.Unlock()
			gp, gc, gs := normalizedRuns(rec.runs)
			wp, wc, ws := normalizedRuns(parseRuns(want))
			if gp != wp || gc != wc || gs != ws {
				t.Errorf("side channel differs from the real tool's:\n got  %s | tail c%d s%d\n want %s | tail c%d s%d", gp, gc, gs, wp, wc, ws)
			}
		})
	}
}

// TestLatFirstSender checks which side sends the first RoCE request in
// send_lat and write_lat against the real tools' captures (client
// 10.77.0.12, server 10.77.0.11): perftest's send_lat server polls its
// receive queue first, so its client sends first; in write_lat the server
// writes first. A softroce client facing ib_send_lat would otherwise wait
// for a message the server is waiting for too.
func TestLatFirstSender(t *testing.T) {
	bin := tooltest.Binary(t)
	for _, tool := range []string{"send_lat", "write_lat"} {
		t.Run(tool, func(t *testing.T) {
			capClient := netip.MustParseAddr("10.77.0.12")
			want := firstRequestFrom(t, filepath.Join(tooltest.CapturesDir, tool+".pcap")) == capClient
			sa, ca := tooltest.LoopPair()
			sport := tooltest.FreeTCPPort(t)
			dir := t.TempDir()
			ps, pc := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
			s, c := tooltest.RunPair(t, 60*time.Second,
				[]string{bin, tool, "-d", sa, "-p", strconv.Itoa(sport), "-n", "5", "-s", "64", "--pcap", ps},
				[]string{bin, tool, "-d", ca, "-p", strconv.Itoa(sport), "-n", "5", "-s", "64", "--pcap", pc, sa})
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("server: %v\nclient: %v", s, c)
			}
			// Read the pcap of the side that should answer: it records a
			// request it receives before it can send its own, while a
			// sender's own packet is recorded only after the send returns
			// (the answer may be recorded before it). So the answering
			// side's first request shows who really sent first.
			answerer, first := ps, netip.MustParseAddr(ca)
			if !want {
				answerer, first = pc, netip.MustParseAddr(sa)
			}
			if got := firstRequestFrom(t, answerer); got != first {
				t.Errorf("first request from %v, want %v (client sends first in the real tools: %v)", got, first, want)
			}
		})
	}
}

// firstRequestFrom returns the source address of the first RoCE request
// packet in a pcap.
func firstRequestFrom(t *testing.T, path string) netip.Addr {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		var h wire.BTH
		if len(p.Payload) < wire.BTHLen {
			continue
		}
		if h.Decode(p.Payload); h.Opcode.Mask()&wire.IsRequest != 0 {
			return p.Src.Addr()
		}
	}
	t.Fatalf("%s: no RoCE request", path)
	return netip.Addr{}
}
