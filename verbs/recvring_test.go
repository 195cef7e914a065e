package verbs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRecvRing: WQEs come out in order with their own SGEs, a popped WQE
// keeps its SGEs when its slot is posted again (a multi-packet SEND holds
// it meanwhile), and resize keeps what is queued.
func TestRecvRing(t *testing.T) {
	r := makeRecvRing(2, 3)
	wr := func(id uint64, n int) *RecvWR {
		w := &RecvWR{WRID: id}
		for i := range n {
			w.SGList = append(w.SGList, SGE{Addr: id<<8 | uint64(i), Length: uint32(10 * (i + 1)), LKey: uint32(id)})
		}
		return w
	}
	r.push(wr(1, 3))
	r.push(wr(2, 1))
	if !r.full() {
		t.Fatal("2 of 2 posted, not full")
	}
	if c, ok := r.peekCap(); !ok || c != 60 {
		t.Fatalf("peekCap = %d, %v; want 60", c, ok)
	}
	var a recvWQE
	if !r.pop(&a) {
		t.Fatal("pop failed")
	}
	r.push(wr(3, 2)) // into a's slot
	if diff := cmp.Diff(wr(1, 3).SGList, a.sges()); diff != "" || a.wrid != 1 || a.cap != 60 {
		t.Fatalf("popped WQE %d (cap %d) changed by a post into its slot:\n%s", a.wrid, a.cap, diff)
	}
	r.resize(4)
	r.push(wr(4, 3))
	for _, want := range []*RecvWR{wr(2, 1), wr(3, 2), wr(4, 3)} {
		var w recvWQE
		if !r.pop(&w) || w.wrid != want.WRID {
			t.Fatalf("popped %d, want %d", w.wrid, want.WRID)
		}
		if diff := cmp.Diff(want.SGList, w.sges()); diff != "" {
			t.Fatalf("WQE %d SGEs:\n%s", w.wrid, diff)
		}
	}
	var w recvWQE
	if r.pop(&w) {
		t.Fatal("pop from an empty ring")
	}
}
