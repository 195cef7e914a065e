package verbs

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestCQMirrorLen: the mirrored count follows the completions waiting,
// through pushes and polls, as the C library's poll reads it.
func TestCQMirrorLen(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	var n atomic.Int32
	a.scq.MirrorLen(&n)
	for i := 0; i < 3; i++ {
		if _, err := a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGList: sge(a, 0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.scq.Len() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got, want := n.Load(), int32(a.scq.Len()); got != want || want != 3 {
		t.Fatalf("mirror %d, Len %d, want 3", got, want)
	}
	wc := make([]WC, 2)
	if k := a.scq.Poll(wc); k != 2 || n.Load() != 1 {
		t.Fatalf("polled %d, mirror %d, want 2 and 1", k, n.Load())
	}
	a.scq.MirrorLen(nil)
	a.scq.Poll(wc)
	if n.Load() != 1 {
		t.Fatalf("mirror %d after MirrorLen(nil), want it left at 1", n.Load())
	}
}

// TestNodeGUIDFor: the GUID a device is listed with before it opens is the
// one QueryDevice reports once it has.
func TestNodeGUIDFor(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	if got, want := NodeGUIDFor(a.dev.LocalAddr().Addr(), [6]byte{}), a.dev.QueryDevice().NodeGUID; got != want {
		t.Fatalf("NodeGUIDFor %#x, QueryDevice %#x", got, want)
	}
	if NodeGUIDFor(a.dev.LocalAddr().Addr(), [6]byte{2, 0, 1, 2, 3, 4}) == a.dev.QueryDevice().NodeGUID {
		t.Fatal("a MAC given does not change the GUID")
	}
}
