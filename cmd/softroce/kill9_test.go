package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/tooltest"
)

// The kill -9 tests: one side of a running ping-pong or perftest is
// killed mid-run; the survivor must report the failure (the error
// completion in the real tool's words, or the dead peer) and exit 1
// within its budget, never hang.

// k9Proc is a tool process whose stdout is watched line by line.
type k9Proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	errb   bytes.Buffer
	lines  chan string
	done   chan struct{}
	code   int
	exitAt time.Time
}

func k9Start(ctx context.Context, t *testing.T, env, argv []string) *k9Proc {
	t.Helper()
	p := &k9Proc{lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stderr = &p.errb
	p.cmd.WaitDelay = 5 * time.Second
	r, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		err := p.cmd.Wait()
		p.exitAt = time.Now()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		case err != nil:
			p.code = -1
		}
		close(p.done)
	}()
	return p
}

// waitLine waits for a stdout line matching re.
func (p *k9Proc) waitLine(t *testing.T, re string, timeout time.Duration) {
	t.Helper()
	rx := regexp.MustCompile(re)
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case l := <-p.lines:
			if rx.MatchString(l) {
				return
			}
		case <-p.done:
			t.Fatalf("exited (%d) before printing %q:\n%s\n%s", p.code, re, p.stdout(), p.errb.String())
		case <-tm.C:
			t.Fatalf("no line %q within %v:\n%s", re, timeout, p.stdout())
		}
	}
}

func (p *k9Proc) stdout() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }

// k9Budget is how long the survivor may take to exit after the kill: the
// tools' own bounds (the retry budget of about 0.5 s: 1.2-1.5 s measured
// from the kill; pingpong's 5 s --peer-timeout; perftest's 4 × the retry
// budget plus 5 s after the side channel closes) with a wide margin for a
// loaded machine, with the cases running at once.
const k9Budget = 30 * time.Second

// k9Case is one kill -9 case.
type k9Case struct {
	tool   string
	args   []string
	ready  string // the line after which traffic runs
	victim string // "server" or "client"
	want   string // the survivor's stderr
}

func TestKill9(t *testing.T) {
	bin := tooltest.Binary(t)
	// The cases run at once (most of a case is waiting for the survivor to
	// give up on its peer), each pair on addresses and a port of its own.
	var cases []tooltest.Subtest
	for _, tc := range []k9Case{
		{"rc_pingpong", []string{"-n", "100000000", "-s", "64"}, `^  remote address:`, "server",
			`Failed status transport retry counter exceeded \(12\) for wr_id \d+|the peer stopped answering`},
		{"rc_pingpong", []string{"-n", "100000000", "-s", "64"}, `^  remote address:`, "client",
			`Failed status .* for wr_id \d+|the peer stopped answering`},
		{"rc_pingpong", []string{"-n", "100000000", "-s", "64", "-e"}, `^  remote address:`, "client",
			`Failed status .* for wr_id \d+|the peer stopped answering`},
		// A --peer-timeout shorter than the default 5 s: the same watchdog, sooner.
		{"ud_pingpong", []string{"-n", "100000000", "-s", "64", "--peer-timeout=1s"}, `^  remote address:`, "server",
			`the peer stopped answering`},
		{"write_bw", []string{"-D", "60", "-s", "4096"}, `#bytes`, "server",
			`(?s) Completion with error at client\n Failed status 12: wr_id \d+ syndrom 0x[0-9a-f]+\nscnt=\d+, ccnt=\d+\n Failed to complete run_iter_bw function successfully`},
		{"write_bw", []string{"-D", "60", "-s", "4096"}, `#bytes`, "client",
			`Failed to exchange data between server and clients|closed the side channel`},
		{"send_lat", []string{"-n", "100000000"}, `#bytes`, "server",
			`Completion with error at client|closed the side channel`},
		{"send_lat", []string{"-n", "100000000"}, `#bytes`, "client",
			`Completion with error at server|closed the side channel`},
	} {
		name := tc.tool + "-kill-" + tc.victim
		if slices.Contains(tc.args, "-e") {
			name += "-events"
		}
		cases = append(cases, tooltest.Subtest{Name: name, F: func(t *testing.T) { tc.run(t, bin) }})
	}
	tooltest.Concurrently(t, cases...)
}

// run starts the tool as a server and a client, waits until both print
// the ready line, kills the victim mid-run and checks the survivor's exit.
func (tc k9Case) run(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sa, ca := tooltest.LoopPair()
	port := strconv.Itoa(tooltest.FreeTCPPort(t))
	env := tooltest.Env(t)
	srv := k9Start(ctx, t, env, append([]string{bin, tc.tool, "-d", sa, "-p", port}, tc.args...))
	time.Sleep(50 * time.Millisecond)
	client := k9Start(ctx, t, env, append(append([]string{bin, tc.tool, "-d", ca, "-p", port}, tc.args...), "127.0.0.1"))
	defer func() {
		for _, p := range []*k9Proc{srv, client} {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	victim, survivor := srv, client
	if tc.victim == "client" {
		victim, survivor = client, srv
	}
	srv.waitLine(t, tc.ready, time.Minute)
	client.waitLine(t, tc.ready, time.Minute)
	time.Sleep(500 * time.Millisecond) // mid-run
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-survivor.done:
	case <-time.After(k9Budget):
		t.Fatalf("the %s is still running %v after the kill -9 of the %s", map[bool]string{true: "client", false: "server"}[survivor == client], k9Budget, tc.victim)
	}
	took := survivor.exitAt.Sub(killed)
	stderr := survivor.errb.String()
	t.Logf("survivor exited %d after %v: %q", survivor.code, took.Round(time.Millisecond), strings.TrimSpace(stderr))
	if survivor.code != cli.ExitFailure {
		t.Errorf("survivor exit %d, want 1\nstdout:\n%s\nstderr:\n%s", survivor.code, survivor.stdout(), stderr)
	}
	if !regexp.MustCompile(tc.want).MatchString(stderr) {
		t.Errorf("survivor stderr %q does not match %q", stderr, tc.want)
	}
}
