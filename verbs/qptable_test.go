package verbs

import (
	"errors"
	"syscall"
	"testing"
)

// TestQPTableAlloc checks the cyclic allocator on a small range spanning
// three chunks: numbers go out in order, freed ones are reused only after
// the wrap, full chunks are skipped, a full range says so, and emptied
// chunks are dropped.
func TestQPTableAlloc(t *testing.T) {
	const first, last = 0x11, 3*qpChunkLen + 5
	tab := newQPTable(first, last)
	qps := map[uint32]*QP{}
	take := func() uint32 {
		t.Helper()
		n, ok := tab.alloc()
		if !ok {
			t.Fatalf("alloc failed with %d in use", tab.inUse)
		}
		if n < first || n > last || qps[n] != nil {
			t.Fatalf("alloc gave %#x: outside the range or in use", n)
		}
		qps[n] = &QP{qpn: n}
		tab.put(n, qps[n])
		return n
	}
	free := func(n uint32) {
		t.Helper()
		if !tab.del(n, qps[n]) {
			t.Fatalf("del %#x failed", n)
		}
		delete(qps, n)
	}
	for want := uint32(first); want <= last; want++ {
		if n := take(); n != want {
			t.Fatalf("allocation %#x, want %#x (sequential)", n, want)
		}
	}
	if _, ok := tab.alloc(); ok {
		t.Fatal("alloc succeeded on a full range")
	}
	// Free one number in the middle of chunk 2 and one in chunk 0: after
	// the wrap the allocator finds chunk 0's, then skips full chunk 1.
	free(2*qpChunkLen + 7)
	free(0x20)
	if n := take(); n != 0x20 {
		t.Fatalf("after the wrap got %#x, want 0x20", n)
	}
	if n := take(); n != 2*qpChunkLen+7 {
		t.Fatalf("got %#x, want %#x", n, 2*qpChunkLen+7)
	}
	for n, qp := range qps {
		if tab.get(n) != qp {
			t.Fatalf("get(%#x) lost its QP", n)
		}
	}
	if tab.get(1<<24) != nil || tab.get(last+1) != nil || tab.get(0) != nil {
		t.Fatal("get found a QP that was never put")
	}
	if tab.del(0x20, &QP{}) {
		t.Fatal("del removed another QP's number")
	}
	for n := range qps {
		free(n)
	}
	// Only the chunk the allocator is in stays, empty; it goes once the
	// allocator moves to another chunk.
	for i := range tab.chunks {
		if c := tab.chunks[i].Load(); c != nil && (uint32(i) != tab.cur || c.live != 0) {
			t.Fatalf("chunk %d kept after its last QP went (the allocator is in chunk %d)", i, tab.cur)
		}
	}
	if tab.inUse != 0 {
		t.Fatalf("inUse %d after freeing everything", tab.inUse)
	}
	left := tab.cur
	tab.next = (left + 1) << qpChunkBits // the next chunk (alloc wraps past last)
	n := take()
	if n>>qpChunkBits == left {
		t.Fatalf("allocation %#x is still in chunk %d", n, left)
	}
	if tab.chunks[left].Load() != nil {
		t.Fatalf("empty chunk %d kept after the allocator left it", left)
	}
	free(n)
}

// TestQPTableChurn: creating and destroying one QP at a time (a server
// taking connections one after another) keeps the allocator's chunk: no
// 32 KiB chunk is allocated and cleared for each QP.
func TestQPTableChurn(t *testing.T) {
	tab := newQPTable(firstQPN, maxQPN)
	qp := &QP{}
	churn := func() {
		n, ok := tab.alloc()
		if !ok {
			t.Fatal("alloc failed")
		}
		tab.put(n, qp)
		if !tab.del(n, qp) {
			t.Fatal("del failed")
		}
	}
	churn() // the first chunk
	// 1000 runs stay within the allocator's first chunk (4,096 numbers).
	if n := testing.AllocsPerRun(1000, churn); n != 0 {
		t.Fatalf("%v allocations per QP created and destroyed, want 0", n)
	}
}

// TestQPNumbers: a device numbers QPs from 0x11 up, the GSI QP is 1, a
// destroyed QP's number is not reused at once (cyclic, as rxe), and the
// lookup on the receive path does not allocate.
func TestQPNumbers(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	if a.qp.QPN() != firstQPN {
		t.Fatalf("first QPN %#x, want %#x", a.qp.QPN(), firstQPN)
	}
	init := &QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	q2, err := a.pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	if q2.QPN() != firstQPN+1 {
		t.Fatalf("second QPN %#x, want %#x", q2.QPN(), firstQPN+1)
	}
	gsi, err := a.pd.CreateGSIQP(&QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if gsi.QPN() != 1 {
		t.Fatalf("GSI QPN %#x", gsi.QPN())
	}
	if _, err := a.pd.CreateGSIQP(&QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq}); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second GSI QP: %v, want EBUSY", err)
	}
	if err := q2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if a.dev.qps.get(firstQPN+1) != nil {
		t.Fatal("destroyed QP still in the table")
	}
	q3, err := a.pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	if q3.QPN() != firstQPN+2 {
		t.Fatalf("QPN after a destroy %#x, want %#x", q3.QPN(), firstQPN+2)
	}
	d := a.dev
	var got *QP
	if n := testing.AllocsPerRun(1000, func() { got = d.qps.get(firstQPN + 2) }); n != 0 || got != q3 {
		t.Fatalf("lookup allocates %v times (found %v)", n, got != nil)
	}
}

// BenchmarkQPChurn creates and destroys one RC QP at a time on a device, as
// a server taking connections one after another does.
func BenchmarkQPChurn(b *testing.B) {
	a, _ := newPair(b, pairOpts{})
	init := &QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	b.ReportAllocs()
	for b.Loop() {
		qp, err := a.pd.CreateQP(init)
		if err != nil {
			b.Fatal(err)
		}
		if err := qp.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
}
