package engine

import (
	"math"
	"sync"
	"time"
)

// timerHeap is a Clock on the wall clock whose timers share one binary
// min-heap and one goroutine: a device's QP timers (two per QP) cost no
// goroutine and no runtime timer each, however many QPs there are.
//
// AfterFunc allocates the timer; Stop and Reset are O(log n) and do not
// allocate (the retransmit timer is re-armed per ACK). Callbacks run one
// at a time in the heap's goroutine, without the heap's lock held, so they
// may take other locks and Stop or Reset any timer, their own included. A
// callback delays the ones due after it, so callbacks must not block for
// long (the engine's take a QP's lock and send).
type timerHeap struct {
	base time.Time // origin of the deadlines (monotonic)

	mu     sync.Mutex
	heap   []*heapTimer
	wake   *time.Timer // set for armed, the earliest deadline, while run waits
	armed  int64       // deadline wake is set for; math.MaxInt64 when stopped
	closed bool
}

// heapTimer is one timer of a timerHeap.
type heapTimer struct {
	h    *timerHeap
	f    func()
	when int64 // nanoseconds after h.base
	idx  int   // position in h.heap; -1 when not queued
}

// newTimerHeap returns an empty heap; the caller starts run.
func newTimerHeap() *timerHeap {
	w := time.NewTimer(time.Hour)
	w.Stop()
	return &timerHeap{base: time.Now(), wake: w, armed: math.MaxInt64}
}

// Now returns the wall clock.
func (h *timerHeap) Now() time.Time { return time.Now() }

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
func (h *timerHeap) AfterFunc(d time.Duration, f func()) Timer {
	t := &heapTimer{h: h, f: f, idx: -1}
	h.mu.Lock()
	h.schedule(t, h.deadline(d))
	h.mu.Unlock()
	return t
}

// Stop dequeues the timer; it reports whether the timer was queued. A
// callback already taken off the heap still runs.
func (t *heapTimer) Stop() bool {
	h := t.h
	h.mu.Lock()
	was := t.idx >= 0
	if was {
		h.remove(t.idx)
	}
	h.mu.Unlock()
	return was
}

// Reset (re)queues the timer to fire after d; it reports whether it was
// queued.
func (t *heapTimer) Reset(d time.Duration) bool {
	h := t.h
	h.mu.Lock()
	was := t.idx >= 0
	h.schedule(t, h.deadline(d))
	h.mu.Unlock()
	return was
}

// schedule sets t's deadline, queueing it if needed, and moves the wake-up
// earlier if t is now first. Timers of a closed heap stay unqueued.
func (h *timerHeap) schedule(t *heapTimer, when int64) {
	if h.closed {
		return
	}
	if t.idx < 0 {
		t.idx = len(h.heap)
		h.heap = append(h.heap, t)
		t.when = when
		h.up(t.idx)
	} else {
		old := t.when
		t.when = when
		if when < old {
			h.up(t.idx)
		} else {
			h.down(t.idx)
		}
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

func (h *timerHeap) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.heap[i].idx, h.heap[j].idx = i, j
}

// up sifts position i towards the root; it reports whether it moved.
func (h *timerHeap) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if h.heap[p].when <= h.heap[i].when {
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
		if r := c + 1; r < n && h.heap[r].when < h.heap[c].when {
			c = r
		}
		if h.heap[i].when <= h.heap[c].when {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// len returns the number of queued timers.
func (h *timerHeap) len() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.heap) }

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
		case h.armed != h.heap[0].when:
			h.armed = h.heap[0].when
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
// now and returns its callback; nil if none is due.
func (h *timerHeap) due(now int64) func() {
	if len(h.heap) == 0 || h.heap[0].when > now {
		return nil
	}
	f := h.heap[0].f
	h.remove(0)
	return f
}

// close dequeues every timer and stops the wake-up.
func (h *timerHeap) close() {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.heap {
		t.idx = -1
	}
	clear(h.heap)
	h.heap = h.heap[:0]
	h.wake.Stop()
	h.armed = math.MaxInt64
	h.mu.Unlock()
}
