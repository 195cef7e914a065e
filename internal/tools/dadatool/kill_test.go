package dadatool

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/dada"
	"github.com/softroce/softroce/internal/tooltest"
)

// lockedBuf is an io.Writer safe to read while a process writes to it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ringProc is a softroce process of the kill -9 tests.
type ringProc struct {
	cmd      *exec.Cmd
	out, err lockedBuf
	exited   chan struct{}
}

func startDada(t *testing.T, ctx context.Context, bin string, args ...string) *ringProc {
	t.Helper()
	p := &ringProc{cmd: exec.CommandContext(ctx, bin, append([]string{"dada"}, args...)...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	return p
}

func (p *ringProc) kill9() { p.cmd.Process.Signal(syscall.SIGKILL); <-p.exited }

// exit waits up to d for the process to end and returns its exit status.
func (p *ringProc) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("%v still running after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], d, p.out.String(), p.err.String())
		return -1
	}
}

// waitStderr waits up to d for the process's stderr to contain s.
func (p *ringProc) waitStderr(t *testing.T, s string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for !strings.Contains(p.err.String(), s) {
		if time.Now().After(end) {
			t.Fatalf("%v did not say %q within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], s, d, p.out.String(), p.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitRing(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDadaKill9 kills (SIGKILL) one side of a dada write / dada read pair
// and checks the survivor: it does what psrdada does (waits for the ring to
// be taken over) but says what it waits for, carries on when a new peer
// takes over, and when the ring is destroyed under it exits 1 within a
// bounded time with one line.
func TestDadaKill9(t *testing.T) {
	streamNeedRoot(t)
	bin := tooltest.Binary(t)
	hf := filepath.Join(t.TempDir(), "obs.hdr")
	if err := os.WriteFile(hf, []byte("HDR_SIZE 4096\nSOURCE kill9\nNBIT 8\nUTC_START 2026-01-01-00:00:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const bufsz = 64 << 10
	// generous: the machine may be loaded; the watchers speak after 1 s
	const bound = 20 * time.Second

	// The cases run at once, each on rings of its own: most of a case is
	// waiting for a watcher to speak.
	tooltest.Concurrently(t, tooltest.Subtest{Name: "writer killed", F: func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h := streamRing(t, 4, bufsz)
		ks := h.Key().Short()
		rd := startDada(t, ctx, bin, "read", "-k", ks, "-s")
		wr := startDada(t, ctx, bin, "write", "-k", ks, "-r", "1", "-t", "60", hf)
		waitRing(t, "the writer to fill two blocks", bound, func() bool { return h.Data.Stats().WBufCurr >= 2 })
		wr.kill9()
		rd.waitStderr(t, "exited in the middle of transfer 0; waiting for a new writer to end it", bound)
		rc := startDada(t, ctx, bin, "write", "-k", ks, "-recover", "-r", "0", "-b", "1000", hf)
		if code := rc.exit(t, bound); code != 0 {
			t.Fatalf("dada write -recover: exit %d\n%s%s", code, rc.out.String(), rc.err.String())
		}
		if code := rd.exit(t, bound); code != 0 {
			t.Fatalf("surviving reader: exit %d\n%s%s", code, rd.out.String(), rd.err.String())
		}
		if !strings.Contains(rd.out.String(), "transfer 0 (SOURCE kill9)") {
			t.Fatalf("surviving reader output:\n%s", rd.out.String())
		}
	}}, tooltest.Subtest{Name: "reader killed", F: func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h := streamRing(t, 4, bufsz)
		ks := h.Key().Short()
		rd1 := startDada(t, ctx, bin, "read", "-k", ks)
		wr := startDada(t, ctx, bin, "write", "-k", ks, "-r", "1", "-b", strconv.Itoa(40*bufsz), hf)
		waitRing(t, "the reader to read two blocks", bound, func() bool { return h.Data.Stats().Readers[0].RBuf >= 2 })
		rd1.kill9()
		wr.waitStderr(t, "waiting for a reader: ring "+ks+" is full and no reader is attached", bound)
		rd2 := startDada(t, ctx, bin, "read", "-k", ks, "-s")
		rd2.waitStderr(t, "skipping the rest of that transfer (its header is gone), then waiting for the next one", bound)
		if code := wr.exit(t, 2*bound); code != 0 {
			t.Fatalf("surviving writer: exit %d\n%s%s", code, wr.out.String(), wr.err.String())
		}
		w2 := startDada(t, ctx, bin, "write", "-k", ks, "-r", "0", "-b", "5000", hf)
		if code := w2.exit(t, bound); code != 0 {
			t.Fatalf("second writer: exit %d\n%s", code, w2.err.String())
		}
		if code := rd2.exit(t, bound); code != 0 || !strings.Contains(rd2.out.String(), "5000 bytes") {
			t.Fatalf("joining reader: exit %d\n%s%s", code, rd2.out.String(), rd2.err.String())
		}
	}}, tooltest.Subtest{Name: "ring destroyed", F: func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hr, hw := streamRing(t, 4, bufsz), streamRing(t, 4, bufsz)
		rd := startDada(t, ctx, bin, "read", "-k", hr.Key().Short()) // waits for a header
		wr := startDada(t, ctx, bin, "write", "-k", hw.Key().Short(), "-r", "0", "-b", strconv.Itoa(40*bufsz), hf)
		wr.waitStderr(t, "waiting for a reader", bound)
		waitRing(t, "the reader to lock its ring", bound, func() bool { return hr.Data.Stats().Read == 0 })
		for _, h := range []*dada.HDU{hr, hw} {
			if err := dada.Destroy(h.Key()); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []*ringProc{rd, wr} {
			if code := p.exit(t, bound); code != 1 {
				t.Errorf("%v: exit %d after the ring was destroyed, want 1", p.cmd.Args[1:3], code)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(p.err.String()), "\n") {
				if !strings.Contains(l, "waiting for a reader") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "was removed") {
				t.Errorf("%v: want one line saying the ring was removed, got:\n%s", p.cmd.Args[1:3], strings.Join(lines, "\n"))
			}
		}
	}})
}
