package capitest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onCPU runs argv confined to one CPU (taskset -c), the i-th of those the
// test may use (modulo their count), where the library runs the Go runtime
// on one processor (setProcs in capi/main.go).
func onCPU(argv []string, i int) []string {
	cpus := allowedCPUs()
	return append([]string{"taskset", "-c", itoa(cpus[i%len(cpus)])}, argv...)
}

// allowedCPUs lists the CPUs the test process may run on (a cpuset may
// leave out CPU 0).
func allowedCPUs() []int {
	var set unix.CPUSet
	var cpus []int
	if unix.SchedGetaffinity(0, &set) == nil {
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
	}
	if len(cpus) == 0 {
		cpus = []int{0}
	}
	return cpus
}

// procsLine is the library's debug line that gives the runtime's
// processors (SOFTROCE_DEBUG, at a device's open).
var procsLine = regexp.MustCompile(`GOMAXPROCS=(\d+) cpus=(\d+)`)

// TestProcs: the library runs the Go runtime on one processor when the
// program may use one CPU, on at least two when it may use more, and on
// what GOMAXPROCS says when it is set (1 included, on any machine).
func TestProcs(t *testing.T) {
	needLib(t, "ibv_devinfo", "taskset")
	cases := []struct {
		name  string
		argv  []string
		extra []string
		want  string
	}{
		{"one CPU", onCPU([]string{"ibv_devinfo"}, 0), nil, "1"},
		{"GOMAXPROCS=1", []string{"ibv_devinfo"}, []string{"GOMAXPROCS=1"}, "1"},
		{"GOMAXPROCS=3", []string{"ibv_devinfo"}, []string{"GOMAXPROCS=3"}, "3"},
	}
	if cpus := allowedCPUs(); len(cpus) >= 2 {
		cases = append(cases, struct {
			name  string
			argv  []string
			extra []string
			want  string
		}{"two CPUs", []string{"taskset", "-c", fmt.Sprintf("%d,%d", cpus[0], cpus[1]), "ibv_devinfo"}, nil, "2"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := contextWithTimeout(t, 30*time.Second)
			defer cancel()
			a, _ := addrPair()
			p := start(t, ctx, env(a, append([]string{"SOFTROCE_DEBUG=1"}, c.extra...)...), c.argv...)
			if err := p.wait(); err != nil {
				t.Fatalf("%s", p)
			}
			m := procsLine.FindStringSubmatch(p.stderr.String())
			if m == nil {
				t.Fatalf("no debug line with the runtime's processors:\n%s", p)
			}
			if m[1] != c.want {
				t.Errorf("GOMAXPROCS=%s (cpus=%s), want %s", m[1], m[2], c.want)
			}
		})
	}
}

// TestOneCPUTurns runs testdata/onecpu.c on one CPU: a thread that polls
// an empty CQ, or an rsocket with rpoll(..., 0), in a loop does not hold
// up the runtime's timers and goroutines (the RNR timer of a retried SEND,
// an rsocket's dial), which without the loops' turns ran only when the
// runtime's monitor took the processor back, every 10 ms.
func TestOneCPUTurns(t *testing.T) {
	needLib(t, "taskset")
	runCWrapped(t, "onecpu.c", 2, func(argv []string) []string { return onCPU(argv, 0) })
}

// TestOneCPU runs stock programs in pairs with each side confined to a CPU
// of its own (the same one on a one-CPU machine), where the library runs
// the Go runtime on one processor: perftest's polling and event modes, the
// rdma_cm tools, cmtime and rstream's blocking and non-blocking modes each
// finish as they do unconfined.
func TestOneCPU(t *testing.T) {
	needLib(t, "taskset", "ib_send_lat", "ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_read_lat",
		"rping", "ucmatose", "cmtime", "rstream")
	perftest := [][]string{
		{"ib_send_lat", "-n", "2000"},
		{"ib_send_bw", "-e", "-n", "500"},
		{"ib_write_bw", "-n", "500"},
		{"ib_read_bw", "-n", "500"},
		{"ib_read_lat", "-n", "1000"},
	}
	res := regexp.MustCompile(`(?m)^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+`)
	for _, args := range perftest {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			sa, ca := addrPair()
			port := freePort(t)
			argv := append(append([]string(nil), args...), "-p", itoa(port))
			_, c := runPair(t, port, side{onCPU(argv, 0), env(sa)}, side{onCPU(append(argv, "127.0.0.1"), 1), env(ca)}, 90*time.Second)
			if !res.MatchString(c.stdout.String()) {
				t.Errorf("client printed no result line:\n%s", c)
			}
		})
	}
	cmTools := []struct {
		name           string
		server, client []string
		check          func(s, c *proc) error
		serves         bool // the server runs on after its client: stop it
	}{
		{"rping", []string{"rping", "-s", "-C", "10", "-V", "-v"}, []string{"rping", "-c", "-C", "10", "-V", "-v"},
			func(_, c *proc) error {
				if n := len(pingLine.FindAllString(c.stdout.String(), -1)); n != 10 {
					return fmt.Errorf("%d ping lines, want 10", n)
				}
				return nil
			}, false},
		{"ucmatose", []string{"ucmatose", "-c", "10", "-C", "10"}, []string{"ucmatose", "-c", "10", "-C", "10"},
			func(s, c *proc) error {
				for _, p := range []*proc{s, c} {
					if !strings.Contains(p.stdout.String(), "return status 0") {
						return fmt.Errorf("no 'return status 0' from %s", p.cmd.Args[len(p.cmd.Args)-1])
					}
				}
				return nil
			}, false},
		{"cmtime", []string{"cmtime", "-c", "50"}, []string{"cmtime", "-c", "50"},
			func(_, c *proc) error {
				if !regexp.MustCompile(`(?m)^connect +:`).MatchString(c.stdout.String()) {
					return fmt.Errorf("no step table")
				}
				return nil
			}, true},
		{"rstream", []string{"rstream", "-S", "64", "-C", "1000"}, []string{"rstream", "-S", "64", "-C", "1000"}, rstreamDone, false},
		{"rstream -T n", []string{"rstream", "-T", "n", "-S", "65536", "-C", "200"}, []string{"rstream", "-T", "n", "-S", "65536", "-C", "200"}, rstreamDone, false},
		{"rstream -T b", []string{"rstream", "-T", "b", "-S", "64", "-C", "1000"}, []string{"rstream", "-T", "b", "-S", "64", "-C", "1000"}, rstreamDone, false},
	}
	for _, tc := range cmTools {
		t.Run(tc.name, func(t *testing.T) {
			sa, ca := addrPair()
			port := itoa(freePort(t))
			var s, c []string
			switch tc.server[0] {
			case "rping":
				s = append(append([]string(nil), tc.server...), "-a", sa, "-p", port)
				c = append(append([]string(nil), tc.client...), "-a", sa, "-p", port)
			default:
				s = append(append([]string(nil), tc.server...), "-b", sa, "-p", port)
				c = append(append([]string(nil), tc.client...), "-s", sa, "-p", port)
			}
			var sp, cp *proc
			if tc.serves {
				ctx, cancel := contextWithTimeout(t, 60*time.Second)
				defer cancel()
				sp = start(t, ctx, env(sa), onCPU(s, 0)...)
				waitUDP(t, sa, sp)
				cp = start(t, ctx, env(ca), onCPU(c, 1)...)
				err := cp.wait()
				sp.cmd.Process.Kill()
				sp.wait()
				if err != nil {
					t.Fatalf("client %s\nserver %s", cp, sp)
				}
			} else {
				sp, cp = runCMPair(t, sa, side{onCPU(s, 0), env("")}, side{onCPU(c, 1), env(ca)}, 90*time.Second)
			}
			if err := tc.check(sp, cp); err != nil {
				t.Errorf("%v:\nserver %s\nclient %s", err, sp, cp)
			}
		})
	}
}

// rstreamDone checks that rstream's client printed its result line.
func rstreamDone(_, c *proc) error {
	if !strings.Contains(c.stdout.String(), "custom") {
		return fmt.Errorf("no result line")
	}
	return nil
}
