package interop

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// family is one tool run between softroce and the kernel, in both roles.
type family struct {
	name     string
	guestBin string // rdma-core / perftest program in the guest
	hostTool string // softroce command
	args     string // flags common to both sides
	guestDev string // the guest's device flags
	hostDev  string // softroce's device flags
	// kernelClient: flags added when the kernel is the client (see
	// perftestQPs).
	kernelClient string
	rdmacm       bool // rping style: -s/-c -a ADDR instead of a positional server
	listen       listenKind
	check        func(t *testing.T, run pairRun)
	smoke        bool // part of the CI subset
}

// perftest gets -F everywhere: under TCG on a loaded machine its CPU clock
// estimate in the guest fails ("Correlation coefficient r^2 < 0.9") and,
// without -F, it then exits 1 with "Can't produce a report".
var (
	pingpongDev = [2]string{"-d rxe0 -g 1", "-d " + hostIP + " -g 1"}
	perftestDev = [2]string{"-d rxe0 -x 1", "-d " + hostIP + " -x 1"}
)

func pingpong(name, args string, iters int, smoke bool) family {
	return family{name: name, guestBin: "ibv_" + name, hostTool: name,
		args:     fmt.Sprintf("%s -n %d", args, iters),
		guestDev: pingpongDev[0], hostDev: pingpongDev[1], listen: listenTCP,
		check: checkPingpong(iters), smoke: smoke}
}

func perftest(name, args string, size, iters int, smoke bool) family {
	lk := listenTCP
	if strings.Contains(" "+args+" ", " -R ") {
		lk = listenCM
	}
	sz := ""
	if size > 0 {
		sz = fmt.Sprintf(" -s %d", size)
	} else {
		size = 8 // atomics
	}
	return family{name: name + strings.ReplaceAll(strings.ReplaceAll(args, " ", ""), "-", "_"),
		guestBin: "ib_" + name, hostTool: name,
		args:     fmt.Sprintf("-F %s%s -n %d", args, sz, iters),
		guestDev: perftestDev[0], hostDev: perftestDev[1], listen: lk,
		check: checkPerftest(size, iters), smoke: smoke}
}

// perftestQPs is perftest with -q qps: #iterations counts every QP's
// messages (perftest prints -n × -q).
//
// As the client, the kernel gets -u 20 (a 4.3 s retransmit timeout, not
// perftest's 67 ms). With many QPs, the guest's rxe requester times out
// spuriously on this shared 2-core host, and its retry from a partly
// acknowledged send WQE is broken in the 6.1 kernel: it sends a
// zero-length RDMA WRITE ONLY, shifts the following messages' PSNs by one,
// and the responder NAKs the first new packet (invalid request; status 9 at
// the client). Two kernels fail the same way: write_bw -q 64 -s 65536
// -n 20 rxe<->rxe failed 6 runs in 10 (2 in 5 with -q 16), and passed 5 in
// 5 with -u 20.
func perftestQPs(name string, qps, size, iters int) family {
	f := perftest(name, fmt.Sprintf("-q %d", qps), size, iters, false)
	f.check = checkPerftest(size, iters*qps)
	f.kernelClient = "-u 20"
	return f
}

var families = []family{
	pingpong("rc_pingpong", "-c -s 4096", 100, true),
	pingpong("uc_pingpong", "-c -s 4096", 100, false),
	pingpong("ud_pingpong", "-c -s 512", 100, false),
	pingpong("srq_pingpong", "-c -s 1024 -q 4", 50, false),

	perftest("write_bw", "", 65536, 200, true),
	// 64 QPs × rxe's window of 128 PSNs are 4× softroce's send budget
	// (verbs/budget.go): as client, its QPs take turns against the kernel.
	perftestQPs("write_bw", 64, 65536, 20),
	perftest("send_bw", "", 65536, 200, false),
	perftest("read_bw", "", 65536, 200, false),
	perftest("atomic_bw", "", 0, 200, false),
	perftest("write_lat", "", 64, 200, false),
	perftest("send_lat", "", 64, 200, false),
	perftest("read_lat", "", 64, 200, false),
	perftest("atomic_lat", "", 0, 200, false),
	perftest("send_bw", "-R", 65536, 100, false),
	perftest("write_lat", "-R", 64, 100, false),
	perftest("read_bw", "-R", 65536, 100, false),

	{name: "rping", guestBin: "rping", hostTool: "rping", args: "-V -v -C 20 -S 100",
		rdmacm: true, listen: listenCM, check: checkRping(20)},
}

// TestTools runs every family with the kernel as server and softroce as
// client, then the other way round.
func TestTools(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			bothRoles(t, func(t *testing.T, softroceServer bool) {
				need(t, f.smoke)
				g := bootGuest(t, 0)
				srv, cli := f.endpoints(g, softroceServer)
				srv, cli = withPcap(t, srv), withPcap(t, cli)
				run := runPair(t, srv, cli, f.listen, 120*time.Second)
				f.check(t, run)
			})
		})
	}
}

// bothRoles runs fn as subtests with the kernel as server, then softroce.
func bothRoles(t *testing.T, fn func(t *testing.T, softroceServer bool)) {
	for _, softroceServer := range []bool{false, true} {
		name := "kernel-server"
		if softroceServer {
			name = "softroce-server"
		}
		t.Run(name, func(t *testing.T) { fn(t, softroceServer) })
	}
}

// endpoints returns the server and client commands.
func (f family) endpoints(g *guest, softroceServer bool) (srv, cli endpoint) {
	srvIP := g.ip
	if softroceServer {
		srvIP = hostIP
	}
	guestCmd := func(server bool) string {
		if f.rdmacm {
			if server {
				return fmt.Sprintf("%s -s -a %s %s", f.guestBin, srvIP, f.args)
			}
			return fmt.Sprintf("%s -c -a %s %s", f.guestBin, srvIP, f.args)
		}
		s := fmt.Sprintf("%s %s %s", f.guestBin, f.guestDev, f.args)
		if !server {
			if f.kernelClient != "" {
				s += " " + f.kernelClient
			}
			s += " " + srvIP
		}
		return s
	}
	hostArgs := func(server bool) string {
		if f.rdmacm {
			if server {
				return fmt.Sprintf("%s -s -a %s %s", f.hostTool, srvIP, f.args)
			}
			return fmt.Sprintf("%s -c -a %s -I %s %s", f.hostTool, srvIP, hostIP, f.args)
		}
		s := fmt.Sprintf("%s %s %s", f.hostTool, f.hostDev, f.args)
		if !server {
			s += " " + srvIP
		}
		return s
	}
	if softroceServer {
		return endpoint{cmd: hostArgs(true)}, endpoint{guest: g, cmd: guestCmd(false)}
	}
	return endpoint{guest: g, cmd: guestCmd(true)}, endpoint{cmd: hostArgs(false)}
}

// badOutput finds lines that report a failure in a tool's output.
var badOutput = regexp.MustCompile(`(?im)^.*(fail|invalid data|mismatch|error|couldn't|unable|timed out).*$`)

func checkClean(t *testing.T, side string, r result) {
	t.Helper()
	if r.code != 0 {
		t.Errorf("%s exited with %d (%v)", side, r.code, r.err)
	}
	for _, l := range badOutput.FindAllString(r.out, 5) {
		t.Errorf("%s reports: %s", side, strings.TrimSpace(l))
	}
}

var itersLine = regexp.MustCompile(`(?m)^(\d+) iters in [0-9.]+ seconds`)

// checkPingpong: both sides exit 0, finish all iterations, and report no
// invalid data (-c).
func checkPingpong(iters int) func(*testing.T, pairRun) {
	return func(t *testing.T, run pairRun) {
		for _, s := range []struct {
			side string
			r    result
		}{{"server", run.server}, {"client", run.client}} {
			checkClean(t, s.side, s.r)
			m := itersLine.FindStringSubmatch(s.r.out)
			if m == nil {
				t.Errorf("%s: no 'N iters in' line", s.side)
			} else if n, _ := strconv.Atoi(m[1]); n != iters {
				t.Errorf("%s: %d iterations, want %d", s.side, n, iters)
			}
		}
	}
}

// resultLine is perftest's result row: #bytes #iterations and three (bw) or
// more (lat) numbers.
var resultLine = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)((?:\s+(?:[0-9.]+|-?nan|-?inf)){3,})\s*$`)

// checkPerftest: both sides exit 0 and report nothing wrong; the client
// prints a result row for the size and iterations asked (as does the
// server when it prints one).
func checkPerftest(size, iters int) func(*testing.T, pairRun) {
	return func(t *testing.T, run pairRun) {
		for _, s := range []struct {
			side string
			r    result
			must bool
		}{{"server", run.server, false}, {"client", run.client, true}} {
			checkClean(t, s.side, s.r)
			m := resultLine.FindStringSubmatch(s.r.out)
			if m == nil {
				if s.must {
					t.Errorf("%s: no result row", s.side)
				}
				continue
			}
			b, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			if b != size || n != iters {
				t.Errorf("%s: result row for %d bytes x %d, want %d x %d: %s", s.side, b, n, size, iters, m[0])
			}
		}
	}
}

// checkRping: both sides exit 0, report no mismatch (-V), and show every
// ping's data (-v).
func checkRping(count int) func(*testing.T, pairRun) {
	return func(t *testing.T, run pairRun) {
		checkClean(t, "server", run.server)
		checkClean(t, "client", run.client)
		cli := regexp.MustCompile(`(?m)^ping data: rdma-ping-\d+: `).FindAllString(run.client.out, -1)
		srv := regexp.MustCompile(`(?m)^server ping data: rdma-ping-\d+: `).FindAllString(run.server.out, -1)
		if len(cli) != count || len(srv) != count {
			t.Errorf("ping data lines: client %d, server %d, want %d each", len(cli), len(srv), count)
		}
	}
}
