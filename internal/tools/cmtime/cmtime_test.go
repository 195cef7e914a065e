package cmtime

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// TestCmtime: a client sets up and tears down 20 connections with a
// server of its own on loopback, prints every step's line and cmtime's
// table (bind addr included, as with -b) and exits 0; toward a port nobody
// listens on, each connection's REJECTED (status 8) is printed and the
// client exits 1, where rdma-core's cmtime exits 0.
func TestCmtime(t *testing.T) {
	port := itoa(tooltest.FreeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var sout, serr bytes.Buffer
	go func() { done <- runCtx(sctx, []string{"-b", "127.0.61.1", "-p", port}, &sout, &serr) }()
	defer func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("server exited %d: %s", code, serr.String())
		}
	}()
	var out, errb bytes.Buffer
	time.Sleep(200 * time.Millisecond) // the server's listen
	if code := runCtx(ctx, []string{"-s", "127.0.61.1", "-b", "127.0.61.2", "-c", "20", "-p", port}, &out, &errb); code != 0 {
		t.Fatalf("client exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	want := "creating id\nbinding source address\nresolving address\nresolving route\ncreating qp\nconnecting\ndisconnecting\ndestroying id\nstep              total ms     max ms     min us  us / conn\n"
	if !strings.HasPrefix(out.String(), want) {
		t.Fatalf("output:\n%s\nwant it to start with:\n%s", out.String(), want)
	}
	row := regexp.MustCompile(`(?m)^(create id|bind addr|resolve addr|resolve route|create qp|connect|disconnect|destroy) *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`)
	if n := len(row.FindAllString(out.String(), -1)); n != 8 {
		t.Errorf("%d table rows, want 8:\n%s", n, out.String())
	}

	out.Reset()
	errb.Reset()
	other := itoa(tooltest.FreeTCPPort(t))
	if code := runCtx(ctx, []string{"-s", "127.0.61.1", "-b", "127.0.61.3", "-c", "3", "-p", other}, &out, &errb); code != 1 {
		t.Fatalf("client toward a port nobody listens on exited %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "event: RDMA_CM_EVENT_REJECTED, error: 8\n"); n != 3 {
		t.Errorf("%d REJECTED lines, want 3:\n%s", n, out.String())
	}
	if !strings.Contains(errb.String(), "3 of 3 connections failed") {
		t.Errorf("stderr %q", errb.String())
	}
}

// TestCmtimeBurst: -c 3000, more requests at once than rdma_cm's default
// backlog of 1,024, all connect without a resend (which comes 6.1 s
// later), between two processes: the server's channel counts a request
// until it takes it, and its listener has rdma_ucm's backlog
// (toolkit.ListenBacklog), as stock cmtime's through the C library.
// Before, the requests beyond the backlog were dropped and the connect
// step took 6.2 s.
func TestCmtimeBurst(t *testing.T) {
	bin := tooltest.Binary(t)
	sa, ca := tooltest.LoopPair()
	port := itoa(tooltest.FreeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	env := tooltest.Env(t)
	waitS := tooltest.StartProc(sctx, t, env, []string{bin, "cmtime", "-b", sa, "-p", port})
	defer func() {
		stop()
		waitS()
	}()
	if !tooltest.WaitDevice(sa, 10*time.Second) {
		t.Fatalf("the server's device on %s did not come up", sa)
	}
	time.Sleep(100 * time.Millisecond) // its listen
	c := tooltest.StartProc(ctx, t, env, []string{bin, "cmtime", "-s", sa, "-b", ca, "-c", "3000", "-p", port})()
	if c.Code != 0 {
		t.Fatalf("client: %s", c)
	}
	m := regexp.MustCompile(`(?m)^connect +: +([0-9.]+) `).FindStringSubmatch(c.Stdout)
	if m == nil {
		t.Fatalf("no connect row:\n%s", c)
	}
	if ms, _ := strconv.ParseFloat(m[1], 64); ms >= 5000 {
		t.Errorf("the connect step took %.0f ms: requests were resent\n%s", ms, c.Stdout)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
