package capitest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCErrorPaths builds testdata/errors.c against the installed headers
// and runs it on the library: bad QP transitions, a full send queue
// (ENOMEM and bad_wr), an SGE outside its MR (an error completion, as
// rxe), destroy while in use (EBUSY), completion events under O_NONBLOCK
// and edge-triggered epoll (one per arming, none lost or doubled),
// destroy_cq waiting for the acks, an empty async fd (EAGAIN), 8 threads
// posting and polling at once, refused arguments, and memory unmapped
// while registered (error completions, not a dead process).
func TestCErrorPaths(t *testing.T) {
	runC(t, "errors.c", 11)
}

// TestExtra runs testdata/extra.c: memory windows of both types (bind,
// WRITE through them, outside them), ibv_create_cq_ex's polling ops, and
// the SRQ limit event on the async fd, and the descriptor table the
// library grew at load.
func TestExtra(t *testing.T) {
	runC(t, "extra.c", 4)
}

// TestGuest runs testdata/guest.c: the program's own signal handlers
// without SA_ONSTACK, signals arriving during verbs calls, and fork+exec
// while the device is open.
func TestGuest(t *testing.T) {
	runC(t, "guest.c", 2)
}

// TestSignals runs testdata/signals.c: the library's threads block the
// program's signals while the loading thread keeps its mask, the library
// adds SA_ONSTACK to the handlers installed through signal() and
// sigaction(), and a stack-hungry SIGALRM handler firing every 200 µs
// while the main thread polls a CQ inside the library (perftest's -D)
// does not crash the program.
func TestSignals(t *testing.T) {
	runC(t, "signals.c", 5)
}

// TestIdleWait runs testdata/idle.c: a thread blocked in rdma_get_cm_event,
// ibv_get_cq_event or a blocking rrecv while nothing happens is woken a few
// times in 2 s, not every 100 ms (the library's waits grow while they end
// with nothing), and still returns within 500 ms of its event.
func TestIdleWait(t *testing.T) {
	runC(t, "idle.c", 3)
}

// TestInterrupt: Ctrl-C (SIGINT) ends a stock server waiting on the
// library, as over rxe: the library installs no handler of its own.
func TestInterrupt(t *testing.T) {
	needLib(t, "ib_write_bw")
	a, _ := addrPair()
	port := freePort(t)
	p := start(t, t.Context(), env(a), "ib_write_bw", "-p", itoa(port))
	waitListen(t, port, p)
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("still running 5 s after SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
		t.Fatalf("ended with %v, want killed by SIGINT", p.err)
	}
}

// TestCMErrorPaths runs testdata/cm_errors.c: a port nobody listens on
// (REJECTED, status 8), a rejected request (status 28 and the private
// data), private data both ways through accept, DISCONNECTED on both sides,
// destroying IDs with events outstanding and a listener with a request
// pending, EAGAIN from an empty non-blocking channel, ECE both ways and
// rdma_reject_ece (REJECTED, status 35), the device's PD as every ID's
// id->pd (an MR registered on the listener's serves an accepted QP, as
// with librdmacm), rdma_create_qp making only the CQ not given and writing
// the CQs it used back into the program's attributes (as librdmacm), an SRQ on an ID (rdma_create_srq;
// rdma_post_recv and rdma_get_recv_comp through it; XRC refused),
// rsockets' errnos (ENOTSUP,
// ENOTCONN, ECONNREFUSED, EBADF, EAGAIN) and a non-blocking rsocket
// connection through rpoll.
func TestCMErrorPaths(t *testing.T) {
	runC(t, "cm_errors.c", 13)
}

// runC builds testdata/file against the installed headers and the
// library, runs it with the device's address as its argument, and expects
// want "ok" lines and exit status 0.
func runC(t *testing.T, file string, want int) { runCWrapped(t, file, want, nil) }

// runCWrapped is runC with the program's argv passed through wrap (nil:
// as it is), as onCPU confines it to one CPU.
func runCWrapped(t *testing.T, file string, want int, wrap func([]string) []string) {
	needLib(t, "gcc")
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(file, ".c"))
	cc := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", file), "-L"+libDir,
		"-lrdmacm", "-libverbs", "-lpthread")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	a, _ := addrPair()
	ctx, cancel := contextWithTimeout(t, 90*time.Second)
	defer cancel()
	argv := []string{bin, a}
	if wrap != nil {
		argv = wrap(argv)
	}
	p := start(t, ctx, env(a), argv...)
	err := p.wait()
	for _, line := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	if err != nil {
		t.Fatalf("%s", p)
	}
	if n := strings.Count(p.stdout.String(), "ok "); n != want {
		t.Fatalf("%d cases passed, want %d:\n%s", n, want, p)
	}
}

// TestMonitorSlack runs testdata/slack.c: the library raises the timer
// slack of the Go runtime's monitor thread (200 µs by default, so that it
// does not wake every 20 µs beside the program's threads; misc.c), and of
// no thread of the program's; SOFTROCE_MONITOR_SLACK_NS chooses the value,
// 0 leaves every thread alone, and so does one that is not a number,
// which the device's open then refuses with a line that names it. Reading another thread's slack
// needs CAP_SYS_NICE (CI runs as root).
func TestMonitorSlack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading other threads' timer slack needs CAP_SYS_NICE (CI runs as root)")
	}
	needLib(t, "gcc")
	bin := buildTestdata(t, "slack.c", "-O1", "-lrdmacm", "-libverbs", "-lpthread")
	own, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, env string
		monitor   int
	}{
		{"default", "", 200000},
		{"1ms", "SOFTROCE_MONITOR_SLACK_NS=1000000", 1000000},
		{"off", "SOFTROCE_MONITOR_SLACK_NS=0", own},
		{"bad", "SOFTROCE_MONITOR_SLACK_NS=50us", own},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _ := addrPair()
			ctx, cancel := contextWithTimeout(t, 30*time.Second)
			defer cancel()
			e := env(a)
			if c.env != "" {
				e = env(a, c.env)
			}
			p := start(t, ctx, e, bin, itoa(own), itoa(c.monitor))
			err := p.wait()
			if c.name == "bad" && !strings.Contains(p.stderr.String(), "softroce: SOFTROCE_MONITOR_SLACK_NS=50us: want nanoseconds") {
				t.Errorf("the device's open did not name the bad value: %s", p)
			}
			for _, line := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
				if strings.HasPrefix(line, "FAIL") {
					t.Error(line)
				}
			}
			if err != nil || strings.Count(p.stdout.String(), "ok ") != 4 {
				t.Fatalf("%s", p)
			}
		})
	}
}
