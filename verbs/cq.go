package verbs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
)

// CompChannel is a completion event channel (ibv_comp_channel): armed CQs
// attached to it deliver one event per arming.
type CompChannel struct {
	dev    *Device
	once   sync.Once
	ch     chan *CQ // made by events, on first use
	notify atomic.Pointer[func()]
}

// SetNotify sets a function called after each event the channel receives,
// on the goroutine that raised it (nil: none). It must not block: the C
// library writes an eventfd there, so that a thread waiting outside Go
// is woken by the kernel, without a hand-off through a goroutine.
func (c *CompChannel) SetNotify(f func()) {
	if f == nil {
		c.notify.Store(nil)
		return
	}
	c.notify.Store(&f)
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
// Its queue of events (1024) is made when first used: a channel nobody
// arms a CQ of, or waits on, costs no more than its struct (the C
// library's rdma_create_qp makes two per QP, as librdmacm).
func (d *Device) CreateCompChannel() *CompChannel {
	return &CompChannel{dev: d}
}

// events returns the channel's queue, made on first use.
func (c *CompChannel) events() chan *CQ {
	c.once.Do(func() { c.ch = make(chan *CQ, 1024) })
	return c.ch
}

// GetCQEvent waits for the next CQ event (ibv_get_cq_event). Every event
// must be acknowledged with CQ.AckEvents.
func (c *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-c.events():
		cq.mu.Lock()
		cq.evReceived++
		cq.mu.Unlock()
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.dev.done:
		return nil, ErrClosed
	}
}

// C returns the channel events arrive on (for select loops); events read
// from it directly count as received too.
func (c *CompChannel) C() <-chan *CQ { return c.events() }

// CQ is a completion queue (ibv_cq).
type CQ struct {
	dev *Device
	ch  *CompChannel
	ctx any

	mu         sync.Mutex
	ring       []WC
	head, n    int
	armed      uint8 // 0 off, 1 next completion, 2 solicited only
	evReceived uint32
	evAcked    uint32
	users      int
	destroyed  bool
	overflowed bool
	mirror     *atomic.Int32 // MirrorLen
}

const (
	armNext      = 1
	armSolicited = 2
)

// CreateCQ creates a CQ with room for at least cqe completions
// (ibv_create_cq); ch may be nil.
func (d *Device) CreateCQ(cqe int, ctx any, ch *CompChannel) (*CQ, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if cqe < 1 || cqe > maxCQE {
		return nil, newErr("create cq", "cqe must be 1.."+utoa(maxCQE)+" (max_cqe)", syscall.EINVAL)
	}
	if ch != nil && ch.dev != d {
		return nil, newErr("create cq", "completion channel belongs to another device", syscall.EINVAL)
	}
	return &CQ{dev: d, ch: ch, ctx: ctx, ring: make([]WC, cqe)}, nil
}

// CQE returns the CQ's capacity.
func (cq *CQ) CQE() int { cq.mu.Lock(); defer cq.mu.Unlock(); return len(cq.ring) }

// Context returns the user context given at creation.
func (cq *CQ) Context() any { return cq.ctx }

// Poll moves up to len(wc) completions into wc and returns how many (ibv_poll_cq).
func (cq *CQ) Poll(wc []WC) int {
	cq.mu.Lock()
	k := 0
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	if k > 0 && cq.mirror != nil {
		cq.mirror.Add(-int32(k))
	}
	cq.mu.Unlock()
	return k
}

// MirrorLen makes the CQ keep *n equal to the number of completions
// waiting (Len), updated atomically under the CQ's lock, from now on (nil
// stops it). A C binding reads it to answer an empty poll without a call
// into Go; *n may live in C memory.
func (cq *CQ) MirrorLen(n *atomic.Int32) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.mirror = n
	if n != nil {
		n.Store(int32(cq.n))
	}
}

// Len returns the number of completions waiting.
func (cq *CQ) Len() int { cq.mu.Lock(); defer cq.mu.Unlock(); return cq.n }

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (or, with
// solicitedOnly, the next solicited or error completion) sends one event to
// the completion channel. A completion the receive loop makes sends its
// event at the end of the batch of datagrams it belongs to, once every
// completion of the batch is in its CQ, as a NIC interrupts after writing
// its CQEs.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return newErr("req notify cq", "CQ has no completion channel", syscall.EINVAL)
	}
	cq.mu.Lock()
	if solicitedOnly {
		if cq.armed != armNext {
			cq.armed = armSolicited
		}
	} else {
		cq.armed = armNext
	}
	cq.mu.Unlock()
	return nil
}

// Disarm takes back a ReqNotify(false) that no completion has used yet and
// reports whether there was one: a consumer that drains the CQ itself for
// a while (cm.Agent.PollLink) keeps the completions it makes from waking
// the CQ's waiter, then gives the arming back with Rearm.
func (cq *CQ) Disarm() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.armed != armNext {
		return false
	}
	cq.armed = 0
	return true
}

// Rearm arms the CQ as ReqNotify(false) does and, if completions already
// wait, sends the event at once (Disarm's counterpart: what arrived while
// the CQ was disarmed and was not taken still wakes its waiter).
func (cq *CQ) Rearm() error {
	if cq.ch == nil {
		return newErr("req notify cq", "CQ has no completion channel", syscall.EINVAL)
	}
	cq.mu.Lock()
	raise := cq.n > 0
	if !raise {
		cq.armed = armNext
	}
	cq.mu.Unlock()
	if raise {
		cq.raise()
	}
	return nil
}

// AckEvents acknowledges n events received for this CQ (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) {
	cq.mu.Lock()
	cq.evAcked += uint32(n)
	cq.mu.Unlock()
}

// Resize changes the capacity (ibv_resize_cq); it fails with EINVAL if the
// completions waiting would not fit.
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 || cqe > maxCQE {
		return newErr("resize cq", "cqe must be 1.."+utoa(maxCQE)+" (max_cqe)", syscall.EINVAL)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cqe < cq.n {
		return newErr("resize cq", "more completions waiting than the new size: poll first", syscall.EINVAL)
	}
	r := make([]WC, cqe)
	for i := 0; i < cq.n; i++ {
		r[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = r, 0
	return nil
}

// Destroy frees the CQ (ibv_destroy_cq): EBUSY while QPs use it, or while
// events are unacknowledged.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return newErr("destroy cq", "already destroyed", syscall.EINVAL)
	}
	if cq.users > 0 {
		return newErr("destroy cq", "QPs still use the CQ: destroy them first", syscall.EBUSY)
	}
	if cq.evAcked != cq.evReceived {
		return newErr("destroy cq", "unacknowledged CQ events: call AckEvents", syscall.EBUSY)
	}
	cq.destroyed = true
	return nil
}

// push adds a completion. It returns false on overflow: the CQ error event
// is raised and the caller moves its QP to ERR (docs/protocol.md §5.7: receive CQ full).
// batched: the receive loop is handling a batch (QP.rxBatched, under the
// device's rx.mu), and the completion event waits for the batch's end
// (Device.raiseEvents).
func (cq *CQ) push(wc *WC, solicited, batched bool) bool {
	cq.mu.Lock()
	if cq.n == len(cq.ring) {
		first := !cq.overflowed
		cq.overflowed = true
		cq.mu.Unlock()
		if first {
			cq.dev.event(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		return false
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	cq.n++
	if cq.mirror != nil {
		cq.mirror.Add(1)
	}
	notify := cq.armed == armNext || (cq.armed == armSolicited && (solicited || wc.Status != WCSuccess))
	if notify {
		cq.armed = 0
	}
	cq.mu.Unlock()
	cq.dev.rx.woke.Store(true)
	if notify && cq.ch != nil {
		if batched {
			cq.dev.rx.events = append(cq.dev.rx.events, cq)
			return true
		}
		cq.raise()
	}
	return true
}

// raise delivers a completion event to the CQ's channel.
func (cq *CQ) raise() {
	select {
	case cq.ch.events() <- cq:
	default:
		cq.dev.stats.DropEvents.Add(1)
	}
	if f := cq.ch.notify.Load(); f != nil {
		(*f)()
	}
}
