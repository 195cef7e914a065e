package perftest

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestPeerWatch: the watch sees the peer's close (not its unread data),
// leaves the grace for the error completion, then reports errPeerClosed;
// it never consumes what the peer sent.
func TestPeerWatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := newPeerWatch(conn, 14)
	if w == nil {
		t.Fatal("no watch for a TCP connection")
	}
	w.grace = 200 * time.Millisecond
	poll := func() error {
		w.next = time.Time{} // no rate limit in the test
		return w.check()
	}
	if err := poll(); err != nil {
		t.Fatalf("live peer: %v", err)
	}
	peer.Write([]byte("x")) // the peer's next message, unread
	if err := poll(); err != nil {
		t.Fatalf("peer with data: %v", err)
	}
	peer.Close()
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = poll(); last != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(last, errPeerClosed) {
		t.Fatalf("after the peer's close: %v", last)
	}
	if since := time.Since(w.closedAt); since < w.grace {
		t.Errorf("gave up %v after noticing the close, before the %v grace", since, w.grace)
	}
	var b [1]byte
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(b[:]); n != 1 || b[0] != 'x' {
		t.Errorf("the peer's data was consumed: %d %v", n, err)
	}
	var nilWatch *peerWatch
	if nilWatch.check() != nil {
		t.Error("a nil watch (no side channel) must never fail")
	}
	// The engine's bound: 10 waits of at most 2 x 67.1 ms + 25% jitter.
	if got, want := retryBudget(14, 7), 10*2*(4096*time.Nanosecond<<14)*5/4; got != want {
		t.Errorf("retry budget for timeout 14, retry 7: %v, want %v (verbs.RetryBudget)", got, want)
	}
}
