package verbs

import (
	"math"
	"sync"
	"time"

	"github.com/softroce/softroce/clock"
)

// timerHeap is a clock.Clock on the wall clock whose timers share one binary
// min-heap and one goroutine: a device's QP timers (two per QP) cost no
// goroutine and no runtime timer each, however many QPs there are.
//
// The heap is lazy where the device is busiest. The retransmit timer is
// stopped and re-armed a full timeout later on every ACK: Stop only marks
// the timer inactive, and a Reset to a later deadline only records it;
// the timer keeps its place (its key, never later than its deadline) until
// it reaches the top, where it is dropped or moved down once. So Stop and
// a later Reset are O(1), an earlier Reset is O(log n), and stopped timers
// are swept when they outnumber the live ones. None of them allocates;
// AfterFunc allocates the timer.
//
// Callbacks run one at a time in the heap's goroutine, without the heap's
// lock held, so they may take other locks and Stop or Reset any timer,
// their own included. A callback delays the ones due after it, so
// callbacks must not block for long (the device's take a QP's lock and
// send).
type timerHeap struct {
	base time.Time // origin of the deadlines (monotonic)

	mu     sync.Mutex
	heap   []*heapTimer // min-heap on key
	active int          // active timers (all of them queued)
	stale  int          // queued timers that are not active
	wake   *time.Timer  // set for armed while run waits
	armed  int64        // deadline wake is set for; math.MaxInt64 when stopped
	closed bool
}

// heapTimer is one timer of a timerHeap.
type heapTimer struct {
	h      *timerHeap
	f      func()
	when   int64 // deadline, nanoseconds after h.base (while active)
	key    int64 // the heap orders by this; key <= when while active
	idx    int   // position in h.heap; -1 when not queued
	active bool  // will fire at when
}

// newTimerHeap returns an empty heap; the caller starts run.
func newTimerHeap() *timerHeap {
	w := time.NewTimer(time.Hour)
	w.Stop()
	return &timerHeap{base: time.Now(), wake: w, armed: math.MaxInt64}
}

// Now returns the time: the heap's base plus the monotonic time since,
// one clock read where time.Now makes two (wall and monotonic); the
// result's wall clock does not follow a step of the system's, which
// nothing here reads.
func (h *timerHeap) Now() time.Time { return h.base.Add(time.Since(h.base)) }

// now is the heap's time: nanoseconds since base.
func (h *timerHeap) now() int64 { return int64(time.Since(h.base)) }

// deadline is now+d, saturated.
func (h *timerHeap) deadline(d time.Duration) int64 {
	n := h.now()
	if d > time.Duration(math.MaxInt64-n) {
		return math.MaxInt64
	}
	return n + max(int64(d), 0)
}

// AfterFunc queues a timer that calls f, in the heap's goroutine, after d.
func (h *timerHeap) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &heapTimer{h: h, f: f, idx: -1}
	h.mu.Lock()
	h.schedule(t, h.deadline(d))
	h.mu.Unlock()
	return t
}

// Stop deactivates the timer; it reports whether the timer was active. A
// callback already taken off the heap still runs.
func (t *heapTimer) Stop() bool {
	h := t.h
	h.mu.Lock()
	was := t.active
	if was {
		t.active = false
		h.active--
		h.stale++
		if h.stale > 32 && h.stale > h.active {
			h.sweep()
		}
	}
	h.mu.Unlock()
	return was
}

// Reset (re)arms the timer to fire after d; it reports whether it was
// active.
func (t *heapTimer) Reset(d time.Duration) bool {
	h := t.h
	h.mu.Lock()
	was := t.active
	h.schedule(t, h.deadline(d))
	h.mu.Unlock()
	return was
}

// schedule activates t with deadline when, queueing it or moving it up if
// needed, and moves the wake-up earlier if t is now first. Timers of a
// closed heap stay inactive.
func (h *timerHeap) schedule(t *heapTimer, when int64) {
	if h.closed {
		return
	}
	if !t.active {
		t.active = true
		h.active++
		if t.idx >= 0 {
			h.stale--
		}
	}
	t.when = when
	switch {
	case t.idx < 0:
		t.key = when
		t.idx = len(h.heap)
		h.heap = append(h.heap, t)
		h.up(t.idx)
	case when < t.key:
		t.key = when
		h.up(t.idx)
	default:
		return // later than its key: fixed when it reaches the top
	}
	if t.idx == 0 && when < h.armed {
		h.armed = when
		h.wake.Reset(time.Duration(when - h.now()))
	}
}

// remove takes the timer at position i off the heap.
func (h *timerHeap) remove(i int) {
	t := h.heap[i]
	last := len(h.heap) - 1
	if i != last {
		h.swap(i, last)
	}
	h.heap[last] = nil
	h.heap = h.heap[:last]
	t.idx = -1
	if i != last {
		if !h.up(i) {
			h.down(i)
		}
	}
}

// sweep drops the inactive timers and rebuilds the heap on the deadlines.
func (h *timerHeap) sweep() {
	n := 0
	for _, t := range h.heap {
		if t.active {
			t.key, t.idx = t.when, n
			h.heap[n] = t
			n++
		} else {
			t.idx = -1
		}
	}
	clear(h.heap[n:])
	h.heap = h.heap[:n]
	h.stale = 0
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	// The first deadline cannot have moved earlier: armed stays valid.
}

func (h *timerHeap) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.heap[i].idx, h.heap[j].idx = i, j
}

// up sifts position i towards the root; it reports whether it moved.
func (h *timerHeap) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if h.heap[p].key <= h.heap[i].key {
			break
		}
		h.swap(i, p)
		i, moved = p, true
	}
	return moved
}

// down sifts position i towards the leaves.
func (h *timerHeap) down(i int) {
	n := len(h.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h.heap[r].key < h.heap[c].key {
			c = r
		}
		if h.heap[i].key <= h.heap[c].key {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// len returns the number of active timers.
func (h *timerHeap) len() int { h.mu.Lock(); defer h.mu.Unlock(); return h.active }

// run fires due timers, one callback at a time and outside the lock, until
// done is closed; then it empties the heap, and later Resets queue nothing.
func (h *timerHeap) run(done <-chan struct{}) {
	defer h.close()
	for {
		h.mu.Lock()
		now := h.now()
		f := h.due(now)
		switch {
		case f != nil:
		case len(h.heap) == 0:
			h.armed = math.MaxInt64
			h.wake.Stop()
		case h.armed != h.heap[0].key:
			h.armed = h.heap[0].key
			h.wake.Reset(time.Duration(h.armed - now))
		}
		h.mu.Unlock()
		if f != nil {
			select {
			case <-done:
				return
			default:
			}
			f()
			continue
		}
		select {
		case <-h.wake.C:
			h.mu.Lock()
			h.armed = math.MaxInt64 // fired: the next round re-arms
			h.mu.Unlock()
		case <-done:
			return
		}
	}
}

// due takes the first timer off the heap if its deadline is at or before
// now, deactivates it and returns its callback; nil if none is due. On the
// way it drops inactive timers and moves down those re-armed later, so on
// nil the top (if any) is active and keyed at its deadline.
func (h *timerHeap) due(now int64) func() {
	for len(h.heap) > 0 {
		t := h.heap[0]
		switch {
		case !t.active:
			h.remove(0)
			h.stale--
		case t.key < t.when:
			t.key = t.when
			h.down(0)
		case t.key > now:
			return nil
		default:
			h.remove(0)
			t.active = false
			h.active--
			return t.f
		}
	}
	return nil
}

// close deactivates and dequeues every timer and stops the wake-up.
func (h *timerHeap) close() {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.heap {
		t.idx, t.active = -1, false
	}
	clear(h.heap)
	h.heap = h.heap[:0]
	h.active, h.stale = 0, 0
	h.wake.Stop()
	h.armed = math.MaxInt64
	h.mu.Unlock()
}
