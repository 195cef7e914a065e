package verbs

import (
	"sync"
	"syscall"
)

type recvWQE struct {
	wrid uint64
	nsge int
	sge  [MaxSGE]SGE
	cap  uint64 // total bytes
}

func (w *recvWQE) sges() []SGE { return w.sge[:w.nsge] }

// recvRing is a fixed ring of receive WQEs. A slot's SGEs live in sges,
// stride (the queue's max_sge) apiece, not in a MaxSGE array per slot: a
// 4,096-deep queue of one-SGE WQEs (the CM's GSI QP) takes 96 KiB, not
// 2.2 MiB, and its QP is made in microseconds.
type recvRing struct {
	ring    []recvSlot
	sges    []SGE
	stride  int
	head, n int
}

// recvSlot is a posted receive WQE in a recvRing (its SGEs in sges).
type recvSlot struct {
	wrid uint64
	cap  uint64 // total bytes
	nsge int
}

// makeRecvRing returns a ring of depth WQEs of at most maxSGE SGEs each.
func makeRecvRing(depth, maxSGE int) recvRing {
	maxSGE = max(maxSGE, 1)
	return recvRing{ring: make([]recvSlot, depth), sges: make([]SGE, depth*maxSGE), stride: maxSGE}
}

func (r *recvRing) full() bool { return r.n == len(r.ring) }

// push queues wr (len(wr.SGList) <= the ring's max_sge: the callers check).
func (r *recvRing) push(wr *RecvWR) {
	i := (r.head + r.n) % len(r.ring)
	s := &r.ring[i]
	s.wrid = wr.WRID
	s.nsge = copy(r.sges[i*r.stride:(i+1)*r.stride], wr.SGList)
	s.cap = 0
	for _, g := range wr.SGList {
		s.cap += uint64(g.Length)
	}
	r.n++
}

// peekCap returns the total bytes of the oldest WQE; false if none.
func (r *recvRing) peekCap() (uint64, bool) {
	if r.n == 0 {
		return 0, false
	}
	return r.ring[r.head].cap, true
}

// pop dequeues the oldest WQE into dst (its SGEs copied: the slot may be
// posted again while dst is in use).
func (r *recvRing) pop(dst *recvWQE) bool {
	if r.n == 0 {
		return false
	}
	s := &r.ring[r.head]
	dst.wrid, dst.cap = s.wrid, s.cap
	o := r.head * r.stride
	dst.nsge = copy(dst.sge[:], r.sges[o:o+s.nsge])
	r.head++
	if r.head == len(r.ring) {
		r.head = 0
	}
	r.n--
	return true
}

// resize moves the queued WQEs to a ring of depth slots.
func (r *recvRing) resize(depth int) {
	nr := makeRecvRing(depth, r.stride)
	for i := 0; i < r.n; i++ {
		j := (r.head + i) % len(r.ring)
		nr.ring[i] = r.ring[j]
		copy(nr.sges[i*r.stride:(i+1)*r.stride], r.sges[j*r.stride:(j+1)*r.stride])
	}
	nr.n = r.n
	*r = nr
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	dev    *Device
	pd     *PD
	ctx    any
	maxSGE int

	mu        sync.Mutex
	rq        recvRing
	limit     uint32
	users     int
	destroyed bool
}

// Context returns the user context given at creation.
func (s *SRQ) Context() any { return s.ctx }

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQAttr, ctx any) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > maxQPWR || attr.MaxSGE > maxSRQSGE {
		return nil, newErr("create srq", "max_wr must be 1.."+utoa(maxQPWR)+" and max_sge <= "+utoa(maxSRQSGE), syscall.EINVAL)
	}
	if err := pd.ref(); err != nil {
		return nil, err
	}
	s := &SRQ{dev: pd.dev, pd: pd, ctx: ctx, maxSGE: int(max(attr.MaxSGE, 1)), limit: attr.SRQLimit}
	s.rq = makeRecvRing(int(attr.MaxWR), s.maxSGE)
	return s, nil
}

// PostRecv posts receive WRs (ibv_post_srq_recv); it returns how many were
// posted and, if not all, why the next one was refused.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if s.destroyed {
			return i, newErr("post srq recv", "SRQ destroyed", syscall.EINVAL)
		}
		if len(wr.SGList) > s.maxSGE {
			return i, errTooManyRecvSGE
		}
		if !s.dev.cfg.LateSGECheck && !s.dev.checkSGEs(s.pd, wr.SGList, AccessLocalWrite) {
			return i, errBadLKey
		}
		if s.rq.full() {
			return i, errRQFull
		}
		s.rq.push(wr)
	}
	return len(wrs), nil
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SRQAttr{MaxWR: uint32(len(s.rq.ring)), MaxSGE: uint32(s.maxSGE), SRQLimit: s.limit}
}

// Modify changes the limit (SRQAttrLimit) and/or size (SRQAttrMaxWR) (ibv_modify_srq).
// Setting a non-zero limit arms the limit event: when fewer WQEs than the
// limit remain, EventSRQLimitReached is raised once and the limit returns to 0.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return newErr("modify srq", "unknown attribute mask bits", syscall.EINVAL)
	}
	if mask&SRQAttrMaxWR != 0 {
		if attr.MaxWR < uint32(s.rq.n) || attr.MaxWR < 1 || attr.MaxWR > maxQPWR {
			return newErr("modify srq", "max_wr smaller than the WQEs posted, or above "+utoa(maxQPWR), syscall.EINVAL)
		}
		s.rq.resize(int(attr.MaxWR))
	}
	if mask&SRQAttrLimit != 0 {
		if attr.SRQLimit > uint32(len(s.rq.ring)) {
			return newErr("modify srq", "limit larger than max_wr", syscall.EINVAL)
		}
		s.limit = attr.SRQLimit
	}
	return nil
}

// Destroy frees the SRQ (ibv_destroy_srq); EBUSY while QPs use it.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return newErr("destroy srq", "already destroyed", syscall.EINVAL)
	}
	if s.users > 0 {
		return newErr("destroy srq", "QPs still use the SRQ", syscall.EBUSY)
	}
	s.destroyed = true
	s.pd.unref()
	return nil
}

// take dequeues a receive WQE into dst; fits reports whether need bytes fit
// (nil if unchecked). It raises the limit event when the queue drops below
// the armed limit.
func (s *SRQ) take(dst *recvWQE) bool {
	s.mu.Lock()
	ok := s.rq.pop(dst)
	ev := false
	if ok && s.limit > 0 && uint32(s.rq.n) < s.limit {
		s.limit = 0
		ev = true
	}
	s.mu.Unlock()
	if ev {
		s.dev.event(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return ok
}
