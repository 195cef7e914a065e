package capitest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDevices: ibv_devices and ibv_devinfo -v list softroce's device, with
// the address in use as GID 1, also while another process holds the device.
func TestDevices(t *testing.T) {
	needLib(t, "ibv_devices", "ibv_devinfo", "ib_write_bw")
	a, _ := addrPair()
	out := run(t, env(a), "ibv_devices")
	if !regexp.MustCompile(`(?m)^\s+lo\s+[0-9a-f]{16}$`).MatchString(out) {
		t.Errorf("ibv_devices:\n%s", out)
	}
	// Another process holds the device (its default address) meanwhile.
	port := freePort(t)
	holder := start(t, t.Context(), env("", "SOFTROCE_AUTO_NET=127.61.0"), "ib_write_bw", "-p", itoa(port))
	waitListen(t, port, holder)
	defer holder.cmd.Process.Kill()
	out = run(t, env("", "SOFTROCE_AUTO_NET=127.61.0"), "ibv_devinfo", "-v")
	for _, want := range []string{
		"hca_id:\tlo\n", "transport:\t\t\tInfiniBand (0)\n", "state:\t\t\tPORT_ACTIVE (4)\n",
		"link_layer:\t\tEthernet\n", "max_qp_wr:\t\t\t1048576\n", "max_vl_num:\t\t1 (1)\n",
		// The holder has 127.61.0.1; this process takes the next address.
		"GID[  1]:\t\t::ffff:127.61.0.2, RoCE v2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
		}
	}
}

// run runs a program to completion and returns its stdout.
func run(t *testing.T, envv []string, argv ...string) string {
	t.Helper()
	ctx, cancel := contextWithTimeout(t, 20*time.Second)
	defer cancel()
	p := start(t, ctx, envv, argv...)
	if err := p.wait(); err != nil {
		t.Fatalf("%s", p)
	}
	return p.stdout.String()
}

// TestPingpong: rdma-core's four ping-pong examples, unmodified, in pairs.
func TestPingpong(t *testing.T) {
	needLib(t, "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong")
	for _, args := range [][]string{
		{"ibv_rc_pingpong"},
		{"ibv_rc_pingpong", "-e"},
		{"ibv_rc_pingpong", "-s", "65536", "-n", "100"},
		{"ibv_rc_pingpong", "-s", "1", "-m", "1024", "-n", "200"},
		{"ibv_rc_pingpong", "-N"}, // the ibv_wr_* post API
		{"ibv_rc_pingpong", "-c", "-n", "100"},
		{"ibv_uc_pingpong"},
		{"ibv_uc_pingpong", "-e", "-s", "2048"},
		{"ibv_ud_pingpong"},
		{"ibv_ud_pingpong", "-e", "-s", "1024"},
		{"ibv_srq_pingpong"},
		{"ibv_srq_pingpong", "-e", "-q", "4", "-n", "200"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			sa, ca := addrPair()
			port := freePort(t)
			argv := append(append([]string(nil), args...), "-g", "1", "-p", itoa(port))
			s, c := runPair(t, port, side{argv, env(sa)}, side{append(argv, "127.0.0.1"), env(ca)}, 60*time.Second)
			for _, p := range []*proc{s, c} {
				if !strings.Contains(p.stdout.String(), "iters in") || !strings.Contains(p.stdout.String(), "GID ::ffff:127.60.") {
					t.Errorf("no result:\n%s", p)
				}
			}
		})
	}
}

// TestPerftest: perftest 4.5's eight tests, unmodified, in pairs, with the
// options the issue lists.
func TestPerftest(t *testing.T) {
	needLib(t, "ib_send_bw", "ib_send_lat", "ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_read_lat",
		"ib_atomic_bw", "ib_atomic_lat")
	for _, args := range [][]string{
		{"ib_send_bw"}, {"ib_send_lat"}, {"ib_write_bw"}, {"ib_write_lat"},
		{"ib_read_bw"}, {"ib_read_lat"}, {"ib_atomic_bw"}, {"ib_atomic_lat"},
		{"ib_atomic_bw", "-A", "FETCH_AND_ADD"},
		{"ib_write_bw", "-a", "-n", "20"},
		{"ib_read_lat", "-a", "-n", "20"},
		{"ib_send_bw", "-b", "-s", "65536", "-n", "200"},
		{"ib_write_bw", "-q", "4", "-n", "200"},
		{"ib_read_bw", "-q", "4", "-n", "200"},
		{"ib_send_bw", "-e"}, {"ib_send_lat", "-e"}, {"ib_read_bw", "-e"},
		{"ib_send_bw", "--use-srq"},
		{"ib_write_bw", "--use_old_post_send"},
		{"ib_send_bw", "-c", "UC"}, {"ib_write_lat", "-c", "UC"},
		{"ib_send_bw", "-c", "UD"}, {"ib_send_lat", "-c", "UD", "-s", "1024"},
		{"ib_write_bw", "-s", "1048576", "-n", "200"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			sa, ca := addrPair()
			port := freePort(t)
			argv := append(append([]string(nil), args...), "-p", itoa(port))
			s, c := runPair(t, port, side{argv, env(sa)}, side{append(argv, "127.0.0.1"), env(ca)}, 90*time.Second)
			res := regexp.MustCompile(`(?m)^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+`)
			for _, p := range []*proc{s, c} {
				if !res.MatchString(p.stdout.String()) && !strings.Contains(args[0], "lat") {
					t.Errorf("no result line:\n%s", p)
				}
			}
			if !res.MatchString(c.stdout.String()) {
				t.Errorf("client printed no result line:\n%s", c)
			}
		})
	}
}

// TestCrossed: each stock program against softroce's Go tool of the same
// name, in both roles.
func TestCrossed(t *testing.T) {
	needLib(t, "ibv_rc_pingpong", "ibv_ud_pingpong", "ib_write_bw", "ib_read_lat")
	for _, tc := range []struct {
		stock []string
		goCmd []string
	}{
		{[]string{"ibv_rc_pingpong", "-g", "1"}, []string{"rc_pingpong", "-g", "1"}},
		{[]string{"ibv_ud_pingpong", "-g", "1"}, []string{"ud_pingpong", "-g", "1"}}, // both default to 1024-byte messages
		{[]string{"ib_write_bw"}, []string{"write_bw"}},
		{[]string{"ib_read_lat"}, []string{"read_lat"}},
		{[]string{"ib_send_bw", "-e"}, []string{"send_bw", "-e"}},
	} {
		for _, stockServes := range []bool{true, false} {
			name := tc.stock[0] + " serves"
			if !stockServes {
				name = tc.goCmd[0] + " serves"
			}
			t.Run(name, func(t *testing.T) {
				sa, ca := addrPair()
				port := freePort(t)
				stock := append(append([]string(nil), tc.stock...), "-p", itoa(port))
				goArgs := append(append([]string{goTool}, tc.goCmd...), "-p", itoa(port))
				if stockServes {
					runPair(t, port, side{stock, env(sa)}, side{append(append(goArgs, "-d", ca), "127.0.0.1"), env("")}, 60*time.Second)
				} else {
					runPair(t, port, side{append(goArgs, "-d", sa), env("")}, side{append(stock, "127.0.0.1"), env(ca)}, 60*time.Second)
				}
			})
		}
	}
}

// TestEventWaitOnLink: a program blocked in ibv_get_cq_event waits on the
// device's socket too and handles the datagram that arrives on its own
// thread (srgo_cc_wait), instead of being woken by the device's receive
// goroutine: stock ib_send_lat -e's client handles at least half of its
// datagrams itself (all of them here; none before) and completes. Before
// the completion events were raised at the end of the receive batch, this
// hung perftest's event mode within 50 messages (a reply's event came
// before the send completion of the ACK behind it).
func TestEventWaitOnLink(t *testing.T) {
	needLib(t, "ib_send_lat")
	sa, ca := addrPair()
	port := freePort(t)
	stats := filepath.Join(t.TempDir(), "client")
	argv := []string{"ib_send_lat", "-e", "-s", "8", "-n", "2000", "-p", itoa(port)}
	_, c := runPair(t, port, side{argv, env(sa)}, side{append(argv, "127.0.0.1"), env(ca, "SOFTROCE_STATS="+stats)}, 60*time.Second)
	if !regexp.MustCompile(`(?m)^ +8 +2000 +[0-9.]+`).MatchString(c.stdout.String()) {
		t.Fatalf("client printed no result line:\n%s", c)
	}
	b, err := os.ReadFile(stats)
	if err != nil {
		t.Fatalf("no SOFTROCE_STATS file: %v", err)
	}
	dev := map[string]uint64{}
	for _, kv := range strings.Fields(regexp.MustCompile(`(?m)^device \S+ counters:.*$`).FindString(string(b))) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			dev[k], _ = strconv.ParseUint(v, 10, 64)
		}
	}
	if dev["RxPackets"] < 2000 || dev["RxPolled"]*2 < dev["RxPackets"] {
		t.Errorf("the client's thread handled %d of %d datagrams itself, want at least half:\n%s", dev["RxPolled"], dev["RxPackets"], b)
	}
}
