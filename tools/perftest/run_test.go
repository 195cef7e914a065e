package perftest

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
	"github.com/softroce/softroce/wire"
)

// openLoopDevice opens a verbs device on addr:4791, closed when t ends.
func openLoopDevice(t *testing.T, name, addr string) *verbs.Device {
	t.Helper()
	ep, err := udp.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), 4791))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open(ep, &verbs.Config{Name: name})
	if err != nil {
		ep.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// TestRunLibrary: a Go program runs a write_bw measurement between two
// devices it opened itself, with perftest's options, and gets perftest's
// report with the size and iterations it asked for.
func TestRunLibrary(t *testing.T) {
	sa, ca := tooltest.LoopPair()
	srv, cli := openLoopDevice(t, "srv0", sa), openLoopDevice(t, "cli0", ca)
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var so, co strings.Builder
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv, "write_bw", []string{"-p", port, "-n", "20", "-s", "4096"}, &so) }()
	cerr := Run(ctx, cli, "write_bw", []string{"-p", port, "-n", "20", "-s", "4096", sa}, &co)
	serr := <-done
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co.String(), serr, so.String())
	}
	for who, out := range map[string]string{"client": co.String(), "server": so.String()} {
		for _, re := range []string{`(?m)Device         : (srv0|cli0)$`, `(?m)^ 4096 +20 +\d`} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("%s output does not match %q:\n%s", who, re, out)
			}
		}
	}
}

// TestRunLibraryErrors: bad tests and arguments are ErrUsage, before any
// connection.
func TestRunLibraryErrors(t *testing.T) {
	sa, _ := tooltest.LoopPair()
	dev := openLoopDevice(t, "lib0", sa)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		test string
		args []string
		want string
	}{
		{"write_bw", []string{"-d", "lo"}, "Run uses the one it is given"},
		{"write_bw", []string{"--pcap", "x.pcap"}, "Run uses the one it is given"},
		{"writ_bw", nil, `unknown test "writ_bw"`},
		{"send_bw", []string{"-n", "zero"}, "zero"},
		{"send_bw", []string{"-x", "9"}, "GID index 9"},
		{"read_lat", []string{"--dont_xchg_versions"}, "not compatible with versions older than 5.70"}, // perftest's version check
	} {
		err := Run(ctx, dev, tc.test, tc.args, new(strings.Builder))
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v; want ErrUsage mentioning %q", tc.test, tc.args, err, tc.want)
		}
	}
	if err := Run(ctx, nil, "send_bw", nil, new(strings.Builder)); !errors.Is(err, ErrUsage) {
		t.Errorf("nil device: %v, want ErrUsage", err)
	}
}

// TestRunWarmUp: --perform_warm_up sends -t messages on each QP before
// the measured run, as perftest's: the client sends that many more
// packets (one 4 KiB message per packet), and the report still counts the
// -n iterations alone. send_bw ignores it, as perftest's.
func TestRunWarmUp(t *testing.T) {
	for _, tc := range []struct {
		test  string
		extra uint64 // packets the warm-up adds: -t × -q
	}{
		{"write_bw", 2 * 8},
		{"read_bw", 2 * 8}, // READ requests, one packet each
		{"send_bw", 0},
	} {
		t.Run(tc.test, func(t *testing.T) {
			// sent runs the test and returns the packets the client sent
			// and whether it recovered from a loss (a loaded machine: a
			// loss probe, a retry or a READ asked again sends packets
			// beyond the messages').
			sent := func(warm bool) (uint64, bool, string) {
				sa, ca := tooltest.LoopPair()
				srv, cli := openLoopDevice(t, "srv0", sa), openLoopDevice(t, "cli0", ca)
				port := strconv.Itoa(tooltest.FreeTCPPort(t))
				args := []string{"-p", port, "-n", "20", "-s", "4096", "-t", "8", "-q", "2"}
				if warm {
					args = append(args, "--perform_warm_up")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				var so, co strings.Builder
				done := make(chan error, 1)
				go func() { done <- Run(ctx, srv, tc.test, args, &so) }()
				cerr := Run(ctx, cli, tc.test, append(args, sa), &co)
				if serr := <-done; cerr != nil || serr != nil {
					t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co.String(), serr, so.String())
				}
				st := cli.Stats()
				recovered := st.Retransmits.Load()+st.LossProbes.Load()+st.ReadReRequests.Load()+st.RetryTimeouts.Load() > 0
				return st.TxPackets.Load(), recovered, co.String()
			}
			var cold, warm uint64
			var out string
			for try := 1; ; try++ {
				c, rc, _ := sent(false)
				w, rw, o := sent(true)
				cold, warm, out = c, w, o
				if !rc && !rw {
					break
				}
				if try == 4 {
					t.Fatalf("four pairs of runs recovered from losses: cannot count the warm-up's packets")
				}
				t.Logf("a run recovered from a loss (%d against %d packets): again", w, c)
			}
			if warm-cold != tc.extra {
				t.Errorf("the warm-up sent %d packets more (%d against %d), want %d", warm-cold, warm, cold, tc.extra)
			}
			if !regexp.MustCompile(`(?m)^ 4096 +40 +\d`).MatchString(out) {
				t.Errorf("the report does not count the 40 measured iterations alone:\n%s", out)
			}
		})
	}
}

// TestRunLatencyGap: --latency_gap waits before each post, as perftest's:
// every round trip of send_lat then lasts at least the gap, so the
// reported t_min (half a round trip) is at least half of it. Bandwidth
// tests refuse it with perftest's message. (send_lat, not write_lat: in
// one process the race detector sees write_lat's poll of the buffer the
// engine writes into, which two processes keep apart.)
func TestRunLatencyGap(t *testing.T) {
	sa, ca := tooltest.LoopPair()
	srv, cli := openLoopDevice(t, "srv0", sa), openLoopDevice(t, "cli0", ca)
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	args := []string{"-p", port, "-n", "50", "--latency_gap=2000"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var so, co strings.Builder
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv, "send_lat", args, &so) }()
	cerr := Run(ctx, cli, "send_lat", append(args, sa), &co)
	if serr := <-done; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co.String(), serr, so.String())
	}
	m := regexp.MustCompile(`(?m)^ 2\s+50\s+(\d+\.\d\d)\s`).FindStringSubmatch(co.String())
	if m == nil {
		t.Fatalf("no result line:\n%s", co.String())
	}
	if tmin, _ := strconv.ParseFloat(m[1], 64); tmin < 1000 {
		t.Errorf("t_min %.2f usec, want at least 1000 (half of the 2000 usec gap)", tmin)
	}
	if err := Run(ctx, cli, "write_bw", []string{"--latency_gap=10", sa}, new(strings.Builder)); !errors.Is(err, ErrUsage) ||
		!strings.Contains(err.Error(), "Latency gap feature is only for latency tests") {
		t.Errorf("write_bw --latency_gap: %v, want perftest's refusal", err)
	}
}

// TestRunReleases: Run leaves the device it was given as it found it: the
// MRs it registered (one per QP with --mr_per_qp), like its QPs, CQs, SRQ
// and PD, are gone when it returns, run after run; over TCP's side channel
// and over rdma_cm (-R), whose QPs the CM destroys first.
func TestRunReleases(t *testing.T) {
	sa, ca := tooltest.LoopPair()
	srv, cli := openLoopDevice(t, "srv0", sa), openLoopDevice(t, "cli0", ca)
	for i, tc := range []struct{ test, args string }{
		{"write_bw", "-q 4 --mr_per_qp"},
		{"send_bw", "-q 4 --mr_per_qp --use-srq"},
		{"write_bw", "-q 2 -R"},
		{"send_bw", "-q 2"},
	} {
		port := strconv.Itoa(tooltest.FreeTCPPort(t))
		args := append([]string{"-p", port, "-n", "20", "-s", "4096"}, strings.Fields(tc.args)...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var so, co strings.Builder
		done := make(chan error, 1)
		go func() { done <- Run(ctx, srv, tc.test, args, &so) }()
		cerr := Run(ctx, cli, tc.test, append(args, sa), &co)
		serr := <-done
		cancel()
		if cerr != nil || serr != nil {
			t.Fatalf("run %d, %s %s: client: %v\n%s\nserver: %v\n%s", i, tc.test, tc.args, cerr, co.String(), serr, so.String())
		}
		for name, d := range map[string]*verbs.Device{"server": srv, "client": cli} {
			if n := d.Stats().MRs.Load(); n != 0 {
				t.Errorf("run %d, %s %s: the %s's device still has %d MRs", i, tc.test, tc.args, name, n)
			}
		}
	}
}

// tosRecorder records the TOS of the data packets (not QP1's MADs) a device
// writes.
type tosRecorder struct {
	link.Endpoint
	mu  sync.Mutex
	tos map[uint8]int
}

func (r *tosRecorder) WriteBatch(pkts []link.Packet) (int, error) {
	r.mu.Lock()
	for i := range pkts {
		var p wire.Packet
		if p.Parse(pkts[i].Bytes()) == nil && p.BTH.DestQP != 1 {
			r.tos[pkts[i].TOS]++
		}
	}
	r.mu.Unlock()
	return r.Endpoint.WriteBatch(pkts)
}

// TestRunRdmaCMTOS: with -R, -T is rdma_cm's TOS (perftest sets it on the
// client's test IDs): the client's 20 WRITEs and the server's ACKs carry
// it, the server's QP having taken it from the REQ. (The side channel's
// connection keeps TOS 0, as kernel ib_write_bw -R -T's does.)
func TestRunRdmaCMTOS(t *testing.T) {
	shortCMTimeout(t) // the client's first REQ may come before the server's CM
	sa, ca := tooltest.LoopPair()
	var recs [2]*tosRecorder
	var devs [2]*verbs.Device
	for i, addr := range []string{sa, ca} {
		ep, err := udp.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), 4791))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &tosRecorder{Endpoint: ep, tos: map[uint8]int{}}
		if devs[i], err = verbs.Open(recs[i], &verbs.Config{Name: "tos" + strconv.Itoa(i)}); err != nil {
			ep.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	args := []string{"-p", port, "-n", "20", "-s", "4096", "-R"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var so, co strings.Builder
	done := make(chan error, 1)
	go func() { done <- Run(ctx, devs[0], "write_bw", args, &so) }()
	cerr := Run(ctx, devs[1], "write_bw", append(args, "-T", "104", sa), &co)
	if serr := <-done; cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co.String(), serr, so.String())
	}
	for i, side := range []string{"server", "client"} {
		r := recs[i]
		r.mu.Lock()
		if want := []int{1, 20}[i]; r.tos[104] < want {
			t.Errorf("%s's data packets by TOS: %v, want at least %d with 104", side, r.tos, want)
		}
		r.mu.Unlock()
	}
}
