package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is one finished child process.
type proc struct {
	Stdout, Stderr string
	CPU            time.Duration // user + system, all threads
	Switches       int64         // voluntary + involuntary
	Syscalls       uint64        // traced runs only
}

// runner starts the children: the softroce binary, each in its own process
// group so that a timeout or the end of the harness kills all of it.
type runner struct {
	bin    string
	env    []string
	strace string // path of strace; "" when not tracing
	// perf is the path of perf when it can count the raw_syscalls
	// tracepoint: traced runs then use perf stat, which counts in the
	// kernel and barely slows the process, rather than strace, which
	// stops it at every call (both processes then batch differently).
	perf string
	tmp  string
	// stats is the $SOFTROCE_STATS file the softroce processes append
	// their devices' counters to.
	stats string
}

// devStats sums the counters the last pair's devices wrote to r.stats.
func (r *runner) devStats() map[string]uint64 {
	b, err := os.ReadFile(r.stats)
	if err != nil {
		return map[string]uint64{}
	}
	return parseStats(string(b))
}

// start runs argv (a softroce command) in the background; wait returns its
// result, an error unless it exited 0.
func (r *runner) start(ctx context.Context, argv []string, traced bool) (wait func() (proc, error), err error) {
	args := append([]string{r.bin}, argv...)
	var sfile string
	if traced {
		f, err := os.CreateTemp(r.tmp, "strace-*.txt")
		if err != nil {
			return nil, err
		}
		f.Close()
		sfile = f.Name()
		if r.perf != "" {
			args = append([]string{r.perf, "stat", "-x,", "-e", syscallEvent, "-o", sfile, "--"}, args...)
		} else {
			args = append([]string{r.strace, "-f", "-c", "-q", "-o", sfile}, args...)
		}
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() (proc, error) {
		err := cmd.Wait()
		// Whatever is left of the group (strace's tracees) goes too.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		p := proc{Stdout: o.String(), Stderr: e.String()}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			p.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			p.Switches = ru.Nvcsw + ru.Nivcsw
		}
		if ctx.Err() != nil {
			return p, fmt.Errorf("%s: timed out or interrupted (%v)", argv[0], ctx.Err())
		}
		if err != nil {
			return p, fmt.Errorf("%s: %v\n%s%s", argv[0], err, p.Stdout, p.Stderr)
		}
		if traced {
			b, err := os.ReadFile(sfile)
			if err != nil {
				return p, err
			}
			parse := parseStraceTotal
			if r.perf != "" {
				parse = parsePerfCount
			}
			if p.Syscalls, err = parse(string(b)); err != nil {
				return p, fmt.Errorf("%s: %v", argv[0], err)
			}
		}
		return p, nil
	}, nil
}

// syscallEvent is the tracepoint perf stat counts: every system call entry.
const syscallEvent = "raw_syscalls:sys_enter"

// probePerf returns perf's path if perf stat can count syscallEvent here
// (it needs the tracepoint and the permission to use it), else "".
func probePerf(ctx context.Context) string {
	p, err := exec.LookPath("perf")
	if err != nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, p, "stat", "-x,", "-e", syscallEvent, "--", "true").CombinedOutput()
	if err != nil {
		return ""
	}
	if n, err := parsePerfCount(string(out)); err != nil || n == 0 {
		return ""
	}
	return p
}

// pair runs a server (argv plus serverArgs) and its client (argv plus
// clientArgs and the server's address) within timeout, on a TCP port that
// was free a moment ago.
func (r *runner) pair(ctx context.Context, timeout time.Duration, traced bool, argv, serverArgs, clientArgs []string) (s, c proc, err error) {
	port, err := freePort()
	if err != nil {
		return s, c, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pa := []string{"-p", fmt.Sprint(port)}
	sargs := append(append(append([]string{}, argv...), pa...), serverArgs...)
	cargs := append(append(append(append([]string{}, argv...), pa...), clientArgs...), serverAddr)
	waitS, err := r.start(ctx, sargs, traced)
	if err != nil {
		return s, c, err
	}
	// The client retries its connect while the server comes up.
	time.Sleep(100 * time.Millisecond)
	waitC, err := r.start(ctx, cargs, traced)
	if err != nil {
		cancel()
		waitS()
		return s, c, err
	}
	c, errC := waitC()
	if errC != nil {
		cancel() // the server would wait for a client that is gone
	}
	s, errS := waitS()
	if errC != nil {
		return s, c, fmt.Errorf("client %w", errC)
	}
	if errS != nil {
		return s, c, fmt.Errorf("server %w", errS)
	}
	return s, c, nil
}

// run runs one command to its end within timeout.
func (r *runner) run(ctx context.Context, timeout time.Duration, argv ...string) (proc, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait, err := r.start(ctx, argv, false)
	if err != nil {
		return proc{}, err
	}
	return wait()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", serverAddr+":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freeUDPPort returns a UDP port free on both loopback addresses a moment ago.
func freeUDPPort() (int, error) {
	for range 20 {
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(serverAddr)})
		if err != nil {
			return 0, err
		}
		port := a.LocalAddr().(*net.UDPAddr).Port
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(clientAddr), Port: port})
		a.Close()
		if err == nil {
			b.Close()
			return port, nil
		}
	}
	return 0, errors.New("no UDP port free on both loopback addresses")
}

// build compiles cmd/softroce into dir.
func build(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "softroce")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/softroce")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/softroce: %v\n%s", err, out)
	}
	return bin, nil
}
