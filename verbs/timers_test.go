package verbs

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
)

// checkHeap fails unless h is a min-heap on the keys whose timers know
// their places, active timers are keyed no later than their deadlines,
// and the counts add up.
func checkHeap(t *testing.T, h *timerHeap) {
	t.Helper()
	active := 0
	for i, x := range h.heap {
		if x.idx != i {
			t.Fatalf("timer at %d says it is at %d", i, x.idx)
		}
		if i > 0 && h.heap[(i-1)/2].key > x.key {
			t.Fatalf("heap order broken at %d: parent %d > %d", i, h.heap[(i-1)/2].key, x.key)
		}
		if x.active {
			active++
			if x.key > x.when {
				t.Fatalf("timer at %d keyed %d, after its deadline %d", i, x.key, x.when)
			}
		}
	}
	if active != h.active || len(h.heap)-active != h.stale {
		t.Fatalf("%d active and %d stale timers counted, %d and %d queued", h.active, h.stale, active, len(h.heap)-active)
	}
}

// TestTimerHeapOrder queues, re-arms and stops timers at random (no
// goroutine, synthetic time) and checks that the heap pops exactly the
// queued timers, in deadline order, each with its last deadline.
func TestTimerHeapOrder(t *testing.T) {
	h := newTimerHeap()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 500
	var fired []int
	ts := make([]*heapTimer, n)
	want := map[int]int64{} // queued timer -> deadline
	for i := range ts {
		ts[i] = h.AfterFunc(time.Hour, func() { fired = append(fired, i) }).(*heapTimer)
		want[i] = ts[i].when
	}
	for range 5000 {
		i := rng.IntN(n)
		switch rng.IntN(3) {
		case 0, 1:
			wasQueued := ts[i].Reset(time.Duration(rng.Int64N(int64(time.Hour))))
			_, q := want[i]
			if wasQueued != q {
				t.Fatalf("Reset of timer %d reported queued=%v, want %v", i, wasQueued, q)
			}
			want[i] = ts[i].when
		case 2:
			_, q := want[i]
			if got := ts[i].Stop(); got != q {
				t.Fatalf("Stop of timer %d reported %v, want %v", i, got, q)
			}
			delete(want, i)
		}
		checkHeap(t, h)
	}
	if h.active != len(want) {
		t.Fatalf("heap holds %d active timers, want %d", h.active, len(want))
	}
	var whens []int64
	for f := h.due(math.MaxInt64); f != nil; f = h.due(math.MaxInt64) {
		f()
		i := fired[len(fired)-1]
		whens = append(whens, want[i])
		delete(want, i)
		checkHeap(t, h)
	}
	if len(want) != 0 {
		t.Fatalf("%d queued timers never fired", len(want))
	}
	if !slices.IsSorted(whens) {
		t.Fatal("timers fired out of deadline order")
	}
	for _, x := range ts {
		if x.idx != -1 || x.Stop() {
			t.Fatal("a fired timer still counts as queued")
		}
	}
}

// TestTimerHeapSweep: stopped timers do not pile up in the heap (a QP's
// timers are made and stopped at creation, and stopped at destruction),
// and the sweep keeps the live ones in deadline order.
func TestTimerHeapSweep(t *testing.T) {
	h := newTimerHeap()
	rng := rand.New(rand.NewPCG(3, 4))
	ts := make([]clock.Timer, 1000)
	for i := range ts {
		ts[i] = h.AfterFunc(time.Hour, func() {})
		ts[i].Stop() // as createQP does
	}
	if len(h.heap) > 33 {
		t.Fatalf("%d stopped timers still queued", len(h.heap))
	}
	for _, x := range ts {
		x.Reset(time.Duration(rng.Int64N(int64(time.Hour))))
	}
	for _, x := range ts[:300] {
		x.Reset(time.Hour + time.Duration(rng.Int64N(int64(time.Hour)))) // later: lazily
	}
	for _, x := range ts[300:] {
		x.Stop()
	}
	checkHeap(t, h)
	if len(h.heap) > 2*300+1 || h.len() != 300 {
		t.Fatalf("%d timers queued, %d active; want 300 active, stopped ones swept", len(h.heap), h.len())
	}
	fired := 0
	for f := h.due(math.MaxInt64); f != nil; f = h.due(math.MaxInt64) {
		fired++
		checkHeap(t, h)
	}
	if fired != 300 {
		t.Fatalf("%d timers fired, want 300", fired)
	}
}

// TestTimerHeapDue: only timers whose deadline has passed are due, and a
// timer re-armed later fires at its new deadline.
func TestTimerHeapDue(t *testing.T) {
	h := newTimerHeap()
	a := h.AfterFunc(time.Hour, func() {}).(*heapTimer)
	b := h.AfterFunc(2*time.Hour, func() {}).(*heapTimer)
	if f := h.due(a.when - 1); f != nil {
		t.Fatal("a timer fired before its deadline")
	}
	if f := h.due(a.when); f == nil {
		t.Fatal("timer not due at its deadline")
	}
	if f := h.due(a.when); f != nil || b.idx != 0 {
		t.Fatal("the later timer fired early")
	}
	old := b.when
	b.Reset(3 * time.Hour) // lazily: b keeps its place
	if f := h.due(old); f != nil {
		t.Fatal("a timer re-armed later fired at its old deadline")
	}
	checkHeap(t, h)
	if f := h.due(b.when); f == nil {
		t.Fatal("a timer re-armed later did not fire at its new deadline")
	}
}

// TestTimerHeapNoAlloc pins Stop and Reset (per ACK on the retransmit
// timer) to zero allocations.
func TestTimerHeapNoAlloc(t *testing.T) {
	h := newTimerHeap()
	ts := make([]clock.Timer, 1000)
	for i := range ts {
		ts[i] = h.AfterFunc(time.Hour+time.Duration(i), func() {})
	}
	i := 0
	if n := testing.AllocsPerRun(2000, func() {
		x := ts[i%len(ts)]
		i++
		x.Stop()
		x.Reset(time.Hour + time.Duration(i))
		x.Reset(2 * time.Hour)
	}); n != 0 {
		t.Fatalf("Stop/Reset allocate %v times", n)
	}
}

// TestTimerHeapRun drives the heap's goroutine with real time: callbacks
// re-arm their own timer and stop another one (they run without the heap's
// lock, or this deadlocks), a Reset to an earlier deadline wakes the
// goroutine early, and closing done ends it and empties the heap.
func TestTimerHeapRun(t *testing.T) {
	h := newTimerHeap()
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		h.run(done)
	}()
	var mu sync.Mutex
	count := 0
	fired := make(chan struct{}, 10)
	var self, other clock.Timer
	other = h.AfterFunc(time.Hour, func() { t.Error("stopped timer fired") })
	self = h.AfterFunc(time.Hour, func() {
		mu.Lock()
		count++
		c := count
		mu.Unlock()
		other.Stop()
		if c < 3 {
			self.Reset(time.Millisecond)
		}
		fired <- struct{}{}
	})
	self.Reset(time.Millisecond)
	for i := range 3 {
		select {
		case <-fired:
		case <-time.After(30 * time.Second):
			t.Fatalf("callback %d never ran", i)
		}
	}
	// The goroutine sleeps until an hour-away deadline; an earlier Reset
	// must wake it.
	late := h.AfterFunc(time.Hour, func() { fired <- struct{}{} })
	time.Sleep(5 * time.Millisecond)
	late.Reset(time.Millisecond)
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("a timer moved earlier did not fire")
	}
	h.AfterFunc(time.Hour, func() {})
	close(done)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after done closed")
	}
	if n := h.len(); n != 0 {
		t.Fatalf("%d timers left queued after close", n)
	}
	if late.Reset(time.Millisecond) || h.len() != 0 {
		t.Fatal("a closed heap queued a timer")
	}
}

// BenchmarkTimerRearm re-arms one of n queued timers per op, as an ACK
// does (Stop, then Reset to a full timeout): the device's heap against a
// runtime timer per QP.
func BenchmarkTimerRearm(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, kind := range []string{"heap", "runtime"} {
			b.Run(kind+"/timers="+strconv.Itoa(n), func(b *testing.B) {
				var c clock.Clock = clock.Real{}
				if kind == "heap" {
					c = newTimerHeap() // not run: nothing fires
				}
				ts := make([]clock.Timer, n)
				for i := range ts {
					ts[i] = c.AfterFunc(time.Hour+time.Duration(i), func() {})
				}
				defer func() {
					for _, t := range ts {
						t.Stop()
					}
				}()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					t := ts[i%n]
					i += 7919 // a prime: visit the timers out of order
					t.Stop()
					t.Reset(time.Hour)
				}
			})
		}
	}
}
