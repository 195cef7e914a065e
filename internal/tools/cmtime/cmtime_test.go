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

func itoa(n int) string { return strconv.Itoa(n) }
