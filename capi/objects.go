//go:build linux && cgo && softroce_capi

package main

/*
#include "capi.h"
*/
import "C"

import (
	"errors"
	"math/bits"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softroce/softroce/verbs"
)

// The records behind the C objects. cptr is the C object's address, for
// events that must name it (async events, completion events).

type pdRec struct {
	ctx *devCtx
	pd  *verbs.PD
}

type mrRec struct {
	mr *verbs.MR
}

type mwRec struct {
	mw *verbs.MW
}

type ahRec struct {
	ah *verbs.AH
}

type chanRec struct {
	ctx    *devCtx
	ch     *verbs.CompChannel
	events eventQueue[*cqRec] // completion events not yet taken
	idle   idleWait           // the blocking waits of ibv_get_cq_event (srgo_cc_wait)

	// mu guards cqs and closed, and is held while forward moves events to
	// the fd, so that an event is never pushed for a destroyed CQ
	// (cqRec.gone) nor after the channel is destroyed (its fd closed).
	mu     sync.Mutex
	cqs    int  // CQs using the channel
	closed bool // destroyed
}

type cqRec struct {
	ctx  *devCtx
	cq   *verbs.CQ
	ch   *chanRec
	cptr unsafe.Pointer

	compReported  atomic.Uint32
	asyncReported atomic.Uint32
	gone          atomic.Bool // destroyed: forward pushes no more of its events
}

type srqRec struct {
	ctx  *devCtx
	srq  *verbs.SRQ
	cptr unsafe.Pointer

	mu            sync.Mutex
	rwr           [postChunk]verbs.RecvWR
	sge           [postChunk][]verbs.SGE
	asyncReported atomic.Uint32
}

type qpRec struct {
	ctx  *devCtx
	qp   *verbs.QP
	cptr unsafe.Pointer

	mu sync.Mutex // posting, with its scratch
	// *postScratch is made at the QP's first post (about 4 KiB that a
	// QP never posted to, as a connection only set up and torn down,
	// does not carry).
	*postScratch
	asyncReported atomic.Uint32
}

// postScratch is where a QP's posts convert C work requests (under
// qpRec.mu).
type postScratch struct {
	swr    [postChunk]verbs.SendWR
	rwr    [postChunk]verbs.RecvWR
	sge    [postChunk][]verbs.SGE
	inline [postChunk][]byte
}

// postChunk is how many work requests of a C list are converted per call
// into the transport.
const postChunk = 16

// C layouts read on the hot paths, checked against the headers in verbs.c
// (_Static_assert) and here (init).

type cSGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

type cSendWR struct {
	WRID      uint64
	Next      *cSendWR
	SGList    *cSGE
	NumSGE    int32
	Opcode    uint32
	SendFlags uint32
	Imm       uint32 // imm_data (big-endian) or invalidate_rkey
	W         [4]uint64
	QPType    uint64
	BindMW    unsafe.Pointer
	BindRKey  uint64
	BindMR    unsafe.Pointer
	BindAddr  uint64
	BindLen   uint64
	BindAcc   uint64
}

type cRecvWR struct {
	WRID   uint64
	Next   *cRecvWR
	SGList *cSGE
	NumSGE int32
	_      int32
}

type cWC struct {
	WRID         uint64
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	Imm          uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      uint32
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	_            [2]byte
}

func init() {
	if unsafe.Sizeof(cSendWR{}) != C.sizeof_struct_ibv_send_wr || unsafe.Sizeof(cRecvWR{}) != C.sizeof_struct_ibv_recv_wr ||
		unsafe.Sizeof(cWC{}) != C.sizeof_struct_ibv_wc || unsafe.Sizeof(cSGE{}) != C.sizeof_struct_ibv_sge {
		panic("softroce: libibverbs struct layouts differ from the headers this library was built with")
	}
}

func bad(e syscall.Errno) C.int { return C.int(e) }

// ---- PD ----

//export srgo_alloc_pd
func srgo_alloc_pd(h C.uintptr_t, errp *C.int) C.uintptr_t {
	c, d, ok := ctxDev(h)
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	pd, err := d.AllocPD()
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	return addOrFail(&pdRec{ctx: c, pd: pd}, errp, func() { pd.Dealloc() })
}

// addOrFail stores rec under a new handle, or undoes and sets ENOMEM.
func addOrFail(rec any, errp *C.int, undo func()) C.uintptr_t {
	hh := handles.add(rec)
	if hh == 0 {
		undo()
		*errp = bad(syscall.ENOMEM)
	}
	return C.uintptr_t(hh)
}

//export srgo_dealloc_pd
func srgo_dealloc_pd(h C.uintptr_t) C.int {
	r, ok := lookup[*pdRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.pd.Dealloc(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	return 0
}

// ---- MR ----

//export srgo_reg_mr
func srgo_reg_mr(pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint,
	fd C.int, offset C.uint64_t, lkey, rkey *C.uint32_t, errp *C.int) C.uintptr_t {
	r, ok := lookup[*pdRec](uintptr(pdh))
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	acc := verbs.Access(access)
	var mr *verbs.MR
	var err error
	switch {
	case fd >= 0:
		mr, err = r.pd.RegDmabufMR(int(fd), uint64(offset), uint64(length), uint64(iova), acc)
	case addr == nil && length != 0:
		*errp = bad(syscall.EFAULT)
		return 0
	default:
		if acc&verbs.AccessZeroBased != 0 {
			iova = 0
		}
		mr, err = r.pd.RegMRIOVA(unsafe.Slice((*byte)(addr), int(length)), uint64(iova), acc)
	}
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	*lkey, *rkey = C.uint32_t(mr.LKey()), C.uint32_t(mr.RKey())
	return addOrFail(&mrRec{mr: mr}, errp, func() { mr.Deregister() })
}

//export srgo_rereg_mr
func srgo_rereg_mr(h C.uintptr_t, flags C.int, pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t, access C.int,
	lkey, rkey *C.uint32_t) C.int {
	r, ok := lookup[*mrRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	var pd *verbs.PD
	if flags&verbs.ReregChangePD != 0 {
		p, ok := lookup[*pdRec](uintptr(pdh))
		if !ok {
			return bad(syscall.EINVAL)
		}
		pd = p.pd
	}
	var buf []byte
	if flags&verbs.ReregChangeTranslation != 0 {
		if addr == nil && length != 0 {
			return bad(syscall.EFAULT)
		}
		buf = unsafe.Slice((*byte)(addr), int(length))
	}
	if err := r.mr.Rereg(int(flags), pd, buf, verbs.Access(access)); err != nil {
		return cerr(err)
	}
	*lkey, *rkey = C.uint32_t(r.mr.LKey()), C.uint32_t(r.mr.RKey())
	return 0
}

//export srgo_dereg_mr
func srgo_dereg_mr(h C.uintptr_t) C.int {
	r, ok := lookup[*mrRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.mr.Deregister(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	return 0
}

// ---- MW ----

//export srgo_alloc_mw
func srgo_alloc_mw(pdh C.uintptr_t, typ C.int, rkey *C.uint32_t, errp *C.int) C.uintptr_t {
	r, ok := lookup[*pdRec](uintptr(pdh))
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	mw, err := r.pd.AllocMW(verbs.MWType(typ))
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	*rkey = C.uint32_t(mw.RKey())
	return addOrFail(&mwRec{mw: mw}, errp, func() { mw.Dealloc() })
}

//export srgo_dealloc_mw
func srgo_dealloc_mw(h C.uintptr_t) C.int {
	r, ok := lookup[*mwRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.mw.Dealloc(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	return 0
}

//export srgo_bind_mw
func srgo_bind_mw(qph, mwh C.uintptr_t, b *C.struct_ibv_mw_bind, rkey *C.uint32_t) C.int {
	q, ok1 := lookup[*qpRec](uintptr(qph))
	w, ok2 := lookup[*mwRec](uintptr(mwh))
	if !ok1 || !ok2 {
		return bad(syscall.EINVAL)
	}
	info := verbs.MWBindInfo{Addr: uint64(b.bind_info.addr), Length: uint64(b.bind_info.length),
		Access: verbs.Access(b.bind_info.mw_access_flags)}
	if b.bind_info.mr != nil {
		m, ok := lookup[*mrRec](uintptr(C.sr_mr_h(b.bind_info.mr)))
		if !ok {
			return bad(syscall.EINVAL)
		}
		info.MR = m.mr
	}
	k, err := q.qp.BindMW(w.mw, verbs.MWBind{WRID: uint64(b.wr_id), Flags: verbs.SendFlags(b.send_flags), BindInfo: info})
	if err != nil {
		return cerr(err)
	}
	*rkey = C.uint32_t(k)
	return 0
}

// ---- completion channels and CQs ----

//export srgo_create_comp_channel
func srgo_create_comp_channel(h C.uintptr_t, fd C.int, errp *C.int) C.uintptr_t {
	c, d, ok := ctxDev(h)
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	r := &chanRec{ctx: c, ch: d.CreateCompChannel()}
	r.events.fd = int(fd)
	r.ch.SetNotify(r.forward)
	return addOrFail(r, errp, func() { r.ch.SetNotify(nil) })
}

// forward turns the channel's CQ events into eventfd counts, one each, on
// the goroutine that raised them (verbs.CompChannel.SetNotify: the device's
// receive goroutine, or a program's thread polling the link), so that the
// thread waiting in ibv_get_cq_event is woken by the kernel with no
// goroutine in between.
func (r *chanRec) forward() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		select {
		case cq := <-r.ch.C():
			rec, ok := cq.Context().(*cqRec)
			if !ok || r.closed {
				continue
			}
			if !rec.gone.Load() {
				r.events.push(rec)
			}
		default:
			return
		}
	}
}

//export srgo_destroy_comp_channel
func srgo_destroy_comp_channel(h C.uintptr_t) C.int {
	r, ok := lookup[*chanRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	r.mu.Lock()
	busy := r.cqs > 0
	if !busy {
		r.closed = true // a forward in progress has ended; later ones push nothing
	}
	r.mu.Unlock()
	if busy {
		return bad(syscall.EBUSY)
	}
	handles.remove(uintptr(h))
	r.ch.SetNotify(nil)
	return 0
}

// srgo_cc_wait is a blocking ibv_get_cq_event's wait when no event waits:
// on the device's link and the channel's fd together
// (verbs.Device.WaitLink), handling what the link then holds on this
// thread (verbs.Device.PollLink), which raises the events of the CQs it
// completes (at the end of the batch, on this thread: chanRec.forward
// writes the fd). One thread wake-up per event where the device's receive
// goroutine and this thread took two. It returns 0 when the caller should
// look again, -2 when a signal interrupted the wait, -1 when it cannot
// wait on the link (the caller then blocks on the fd alone).
//
//export srgo_cc_wait
func srgo_cc_wait(h C.uintptr_t) C.int {
	r, ok := lookup[*chanRec](uintptr(h))
	if !ok {
		return -1
	}
	dev := r.ctx.od.dev
	if !dev.CanPollLink() {
		return -1
	}
	return waitLinkThen(dev, r.events.fd, &r.idle)
}

// waitLinkThen is the blocking wait of ibv_get_cq_event (srgo_cc_wait)
// when nothing is queued: what dev's link holds now is handled on this
// thread (PollLink), and only if that was nothing does the thread wait, at
// most idle's bound, on the link and fd together (verbs.Device.WaitLink)
// and handle what then arrived. 0: look again; -2: a signal interrupted
// the wait; -1: it could not wait on the link (the caller waits on fd
// alone). rdma_get_cm_event's wait is srgo_cm_wait's, in cm.go.
func waitLinkThen(dev *verbs.Device, fd int, idle *idleWait) C.int {
	if dev.PollLink() > 0 {
		idle.ended(false)
		return 0
	}
	link, other, err := dev.WaitLink(fd, idle.bound())
	if errors.Is(err, syscall.EINTR) {
		return -2
	}
	if err != nil {
		return -1
	}
	idle.ended(!link && !other)
	dev.PollLink()
	return 0
}

//export srgo_take_cq_event
func srgo_take_cq_event(h C.uintptr_t, out **C.struct_ibv_cq) C.int {
	r, ok := lookup[*chanRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	cq, ok := r.events.take()
	if !ok {
		return 1
	}
	r.idle.ended(false)
	cq.compReported.Add(1)
	*out = (*C.struct_ibv_cq)(cq.cptr)
	return 0
}

//export srgo_create_cq
func srgo_create_cq(h C.uintptr_t, cqe C.int, chh C.uintptr_t, ccq *C.struct_ibv_cq, actual, errp *C.int) C.uintptr_t {
	c, d, ok := ctxDev(h)
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	rec := &cqRec{ctx: c, cptr: unsafe.Pointer(ccq)}
	var ch *verbs.CompChannel
	if chh != 0 {
		cr, ok := lookup[*chanRec](uintptr(chh))
		if !ok {
			*errp = bad(syscall.EINVAL)
			return 0
		}
		rec.ch, ch = cr, cr.ch
	}
	cq, err := d.CreateCQ(int(cqe), rec, ch)
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	rec.cq = cq
	// The C poll reads the count without calling Go (C memory: no Go pointer kept).
	cq.MirrorLen((*atomic.Int32)(unsafe.Pointer(&(*C.struct_sr_cq)(unsafe.Pointer(ccq)).pending)))
	*actual = C.int(cq.CQE())
	hh := addOrFail(rec, errp, func() { cq.Destroy() })
	if hh != 0 && rec.ch != nil {
		rec.ch.mu.Lock()
		rec.ch.cqs++
		rec.ch.mu.Unlock()
	}
	return hh
}

//export srgo_resize_cq
func srgo_resize_cq(h C.uintptr_t, cqe C.int, actual *C.int) C.int {
	r, ok := lookup[*cqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.cq.Resize(int(cqe)); err != nil {
		return cerr(err)
	}
	*actual = C.int(r.cq.CQE())
	return 0
}

//export srgo_destroy_cq
func srgo_destroy_cq(h C.uintptr_t, comp, async *C.uint32_t) C.int {
	r, ok := lookup[*cqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.cq.Destroy(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	r.gone.Store(true)
	r.ctx.dropEvents(r)
	if ch := r.ch; ch != nil {
		// Events of this CQ not yet taken go with it, as the kernel's:
		// under ch.mu, after gone is set, so that a forward in progress
		// has pushed its event already and a later one pushes none.
		ch.mu.Lock()
		ch.events.drop(func(e *cqRec) bool { return e == r })
		ch.cqs--
		ch.mu.Unlock()
	}
	*comp, *async = C.uint32_t(r.compReported.Load()), C.uint32_t(r.asyncReported.Load())
	return 0
}

//export srgo_poll_cq
func srgo_poll_cq(h C.uintptr_t, n C.int, wc *C.struct_ibv_wc) C.int {
	r, ok := lookup[*cqRec](uintptr(h))
	if !ok {
		return -1
	}
	out := unsafe.Slice((*cWC)(unsafe.Pointer(wc)), int(n))
	var buf [16]verbs.WC
	total := 0
	for total < len(out) {
		k := min(len(out)-total, len(buf))
		got := r.cq.Poll(buf[:k])
		for i := 0; i < got; i++ {
			convertWC(&out[total+i], &buf[i])
		}
		total += got
		if got < k {
			break
		}
	}
	return C.int(total)
}

// srgo_poll_link is ibv_poll_cq's call when a CQ a QP uses is empty: the
// polling thread receives what the device's link holds and handles it
// itself (verbs.Device.PollLink), as a NIC would have, instead of waiting
// for the device's receive goroutine to be woken. It returns the number of
// datagrams handled.
//
//export srgo_poll_link
func srgo_poll_link(h C.uintptr_t) C.int {
	r, ok := lookup[*cqRec](uintptr(h))
	if !ok {
		return 0
	}
	return C.int(r.ctx.od.dev.PollLink())
}

func convertWC(o *cWC, w *verbs.WC) {
	*o = cWC{WRID: w.WRID, Status: uint32(w.Status), Opcode: uint32(w.Opcode), VendorErr: w.VendorErr,
		ByteLen: w.ByteLen, QPNum: w.QPNum, SrcQP: w.SrcQP, WCFlags: uint32(w.Flags), PKeyIndex: w.PKeyIndex,
		SLID: w.SLID, SL: w.SL, DLIDPathBits: w.DLIDPathBits}
	switch {
	case w.Flags&verbs.WCWithImm != 0:
		o.Imm = hton32(w.ImmData)
	case w.Flags&verbs.WCWithInv != 0:
		o.Imm = w.ImmData
	}
}

// hton32 turns a host-order value into what a __be32 field holds.
func hton32(v uint32) uint32 { return bits.ReverseBytes32(v) }

//export srgo_req_notify_cq
func srgo_req_notify_cq(h C.uintptr_t, solicited C.int) C.int {
	r, ok := lookup[*cqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	return cerr(r.cq.ReqNotify(solicited != 0))
}

// ---- SRQ ----

//export srgo_create_srq
func srgo_create_srq(pdh C.uintptr_t, a *C.struct_ibv_srq_attr, csrq *C.struct_ibv_srq, errp *C.int) C.uintptr_t {
	p, ok := lookup[*pdRec](uintptr(pdh))
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	rec := &srqRec{ctx: p.ctx, cptr: unsafe.Pointer(csrq)}
	s, err := p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)}, rec)
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	rec.srq = s
	got := s.Query()
	a.max_wr, a.max_sge = C.uint32_t(got.MaxWR), C.uint32_t(got.MaxSGE)
	return addOrFail(rec, errp, func() { s.Destroy() })
}

//export srgo_modify_srq
func srgo_modify_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	r, ok := lookup[*srqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	return cerr(r.srq.Modify(verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)},
		verbs.SRQAttrMask(mask)))
}

//export srgo_query_srq
func srgo_query_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr) C.int {
	r, ok := lookup[*srqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	v := r.srq.Query()
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(v.MaxWR), C.uint32_t(v.MaxSGE), C.uint32_t(v.SRQLimit)
	return 0
}

//export srgo_destroy_srq
func srgo_destroy_srq(h C.uintptr_t, async *C.uint32_t) C.int {
	r, ok := lookup[*srqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.srq.Destroy(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	r.ctx.dropEvents(r)
	*async = C.uint32_t(r.asyncReported.Load())
	return 0
}

//export srgo_post_srq_recv
func srgo_post_srq_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, nbad *C.int) C.int {
	r, ok := lookup[*srqRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, e := postRecvList(&r.rwr, &r.sge, (*cRecvWR)(unsafe.Pointer(wr)), r.srq.PostRecv)
	*nbad = C.int(n)
	return e
}

// postRecvList converts a C receive list in chunks and posts each.
func postRecvList(rwr *[postChunk]verbs.RecvWR, sge *[postChunk][]verbs.SGE, w *cRecvWR,
	post func([]verbs.RecvWR) (int, error)) (int, C.int) {
	done := 0
	for w != nil {
		k := 0
		for ; w != nil && k < postChunk; k, w = k+1, w.Next {
			if w.NumSGE < 0 || w.NumSGE > verbs.MaxSGE {
				if k > 0 {
					if n, err := post(rwr[:k]); err != nil {
						return done + n, cerr(err)
					}
				}
				return done + k, bad(syscall.EINVAL)
			}
			if sge[k] == nil {
				sge[k] = make([]verbs.SGE, 0, verbs.MaxSGE)
			}
			rwr[k] = verbs.RecvWR{WRID: w.WRID, SGList: convertSGEs(sge[k], w.SGList, int(w.NumSGE))}
		}
		n, err := post(rwr[:k])
		if err != nil {
			return done + n, cerr(err)
		}
		done += k
	}
	return done, 0
}

func convertSGEs(dst []verbs.SGE, src *cSGE, n int) []verbs.SGE {
	dst = dst[:0]
	if n == 0 {
		return dst
	}
	for _, s := range unsafe.Slice(src, n) {
		dst = append(dst, verbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey})
	}
	return dst
}

// ---- QP ----

//export srgo_create_qp
func srgo_create_qp(pdh C.uintptr_t, a *C.struct_ibv_qp_init_attr, flags C.uint32_t, scq, rcq, srqh C.uintptr_t, cqp *C.struct_ibv_qp,
	qpn *C.uint32_t, errp *C.int) C.uintptr_t {
	return createQP(pdh, a, flags, scq, rcq, srqh, cqp, qpn, errp, func(pd *verbs.PD, ia *verbs.QPInitAttr) (*verbs.QP, error) {
		return pd.CreateQP(ia)
	})
}

// createQP creates a QP with create (PD.CreateQP, or an rdma_cm ID's
// CreateQP) from the C attributes and ibv_create_qp_ex's create_flags,
// writes back the capabilities granted, and returns its handle.
func createQP(pdh C.uintptr_t, a *C.struct_ibv_qp_init_attr, flags C.uint32_t, scq, rcq, srqh C.uintptr_t, cqp *C.struct_ibv_qp,
	qpn *C.uint32_t, errp *C.int, create func(*verbs.PD, *verbs.QPInitAttr) (*verbs.QP, error)) C.uintptr_t {
	p, ok := lookup[*pdRec](uintptr(pdh))
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	rec := &qpRec{ctx: p.ctx, cptr: unsafe.Pointer(cqp)}
	ia := verbs.QPInitAttr{Context: rec, QPType: verbs.QPType(a.qp_type), SQSigAll: a.sq_sig_all != 0, CreateFlags: verbs.QPCreateFlags(flags),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data)}}
	var cqs [2]*cqRec
	for i, c := range []struct {
		h   C.uintptr_t
		set func(*cqRec)
	}{{scq, func(r *cqRec) { ia.SendCQ = r.cq }}, {rcq, func(r *cqRec) { ia.RecvCQ = r.cq }}} {
		if c.h != 0 {
			r, ok := lookup[*cqRec](uintptr(c.h))
			if !ok {
				*errp = bad(syscall.EINVAL)
				return 0
			}
			c.set(r)
			cqs[i] = r
		}
	}
	if srqh != 0 {
		r, ok := lookup[*srqRec](uintptr(srqh))
		if !ok {
			*errp = bad(syscall.EINVAL)
			return 0
		}
		ia.SRQ = r.srq
	}
	qp, err := create(p.pd, &ia)
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	rec.qp = qp
	for _, r := range cqs {
		if r != nil { // from now on an empty poll of it polls the link (srgo_poll_link)
			atomic.StoreInt32((*int32)(unsafe.Pointer(&(*C.struct_sr_cq)(r.cptr).rxpoll)), 1)
		}
	}
	_, got := qp.Query()
	a.cap.max_send_wr = C.uint32_t(got.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(got.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(got.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(got.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(got.Cap.MaxInlineData)
	*qpn = C.uint32_t(qp.QPN())
	return addOrFail(rec, errp, func() { qp.Destroy() })
}

func ahAttrFromC(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{DGID: *(*[16]byte)(unsafe.Pointer(&a.grh.dgid)), FlowLabel: uint32(a.grh.flow_label),
			SGIDIndex: uint8(a.grh.sgid_index), HopLimit: uint8(a.grh.hop_limit), TrafficClass: uint8(a.grh.traffic_class)},
		IsGlobal: a.is_global != 0, DLID: uint16(a.dlid), SL: uint8(a.sl), PortNum: uint8(a.port_num),
	}
}

func ahAttrToC(a *C.struct_ibv_ah_attr, v *verbs.AHAttr) {
	*(*[16]byte)(unsafe.Pointer(&a.grh.dgid)) = v.GRH.DGID
	a.grh.flow_label = C.uint32_t(v.GRH.FlowLabel)
	a.grh.sgid_index = C.uint8_t(v.GRH.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(v.GRH.HopLimit)
	a.grh.traffic_class = C.uint8_t(v.GRH.TrafficClass)
	a.is_global = 0
	if v.IsGlobal {
		a.is_global = 1
	}
	a.dlid, a.sl, a.port_num = C.uint16_t(v.DLID), C.uint8_t(v.SL), C.uint8_t(v.PortNum)
}

//export srgo_modify_qp
func srgo_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	v := verbs.QPAttr{
		QPState: verbs.QPState(a.qp_state), CurQPState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPNum: uint32(a.dest_qp_num),
		QPAccessFlags: verbs.Access(a.qp_access_flags),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge), MaxInlineData: uint32(a.cap.max_inline_data)},
		AHAttr: ahAttrFromC(&a.ah_attr), PKeyIndex: uint16(a.pkey_index), SQDraining: a.sq_draining != 0,
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer),
		PortNum: uint8(a.port_num), Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
	}
	return cerr(r.qp.Modify(&v, verbs.AttrMask(mask)))
}

//export srgo_query_qp
func srgo_query_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int, init *C.struct_ibv_qp_init_attr) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	v, ia := r.qp.Query()
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = C.enum_ibv_qp_state(v.QPState)
	a.cur_qp_state = C.enum_ibv_qp_state(v.CurQPState)
	a.path_mtu = C.enum_ibv_mtu(v.PathMTU)
	a.path_mig_state = C.IBV_MIG_MIGRATED
	a.qkey = C.uint32_t(v.QKey)
	a.rq_psn = C.uint32_t(v.RQPSN)
	a.sq_psn = C.uint32_t(v.SQPSN)
	a.dest_qp_num = C.uint32_t(v.DestQPNum)
	a.qp_access_flags = C.uint(v.QPAccessFlags)
	a.cap.max_send_wr = C.uint32_t(ia.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(ia.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(ia.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(ia.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(ia.Cap.MaxInlineData)
	ahAttrToC(&a.ah_attr, &v.AHAttr)
	a.pkey_index = C.uint16_t(v.PKeyIndex)
	if v.SQDraining {
		a.sq_draining = 1
	}
	a.max_rd_atomic = C.uint8_t(v.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(v.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(v.MinRNRTimer)
	a.port_num = C.uint8_t(v.PortNum)
	a.timeout = C.uint8_t(v.Timeout)
	a.retry_cnt = C.uint8_t(v.RetryCnt)
	a.rnr_retry = C.uint8_t(v.RNRRetry)
	init.cap = a.cap
	if ia.SQSigAll {
		init.sq_sig_all = 1
	}
	return 0
}

//export srgo_destroy_qp
func srgo_destroy_qp(h C.uintptr_t, async *C.uint32_t) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.qp.Destroy(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	r.ctx.dropEvents(r)
	*async = C.uint32_t(r.asyncReported.Load())
	return 0
}

//export srgo_post_recv
func srgo_post_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, nbad *C.int) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.postScratch == nil {
		r.postScratch = new(postScratch)
	}
	n, e := postRecvList(&r.rwr, &r.sge, (*cRecvWR)(unsafe.Pointer(wr)), r.qp.PostRecv)
	*nbad = C.int(n)
	return e
}

//export srgo_post_send
func srgo_post_send(h C.uintptr_t, wr *C.struct_ibv_send_wr, nbad *C.int) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.postScratch == nil {
		r.postScratch = new(postScratch)
	}
	w := (*cSendWR)(unsafe.Pointer(wr))
	done := 0
	for w != nil {
		k := 0
		var e C.int
		for ; w != nil && k < postChunk; k, w = k+1, w.Next {
			if e = r.convertSend(k, w); e != 0 {
				break
			}
		}
		if k > 0 {
			n, err := r.qp.PostSend(r.swr[:k])
			if err != nil {
				*nbad = C.int(done + n)
				return cerr(err)
			}
			done += k
		}
		if e != 0 {
			*nbad = C.int(done)
			return e
		}
	}
	return 0
}

// convertSend fills r.swr[k] from the C work request w.
func (r *qpRec) convertSend(k int, w *cSendWR) C.int {
	if w.NumSGE < 0 || w.NumSGE > verbs.MaxSGE {
		return bad(syscall.EINVAL)
	}
	if r.sge[k] == nil {
		r.sge[k] = make([]verbs.SGE, 0, verbs.MaxSGE)
	}
	s := &r.swr[k]
	*s = verbs.SendWR{WRID: w.WRID, Opcode: verbs.WROpcode(w.Opcode), Flags: verbs.SendFlags(w.SendFlags)}
	sg := convertSGEs(r.sge[k], w.SGList, int(w.NumSGE))
	switch s.Opcode {
	case verbs.WRRDMAWriteWithImm, verbs.WRSendWithImm:
		s.ImmData = bits.ReverseBytes32(w.Imm)
	case verbs.WRSendWithInv, verbs.WRLocalInv:
		s.ImmData = w.Imm
	}
	switch s.Opcode {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		s.RemoteAddr, s.CompareAdd, s.Swap, s.RKey = w.W[0], w.W[1], w.W[2], uint32(w.W[3])
	case verbs.WRBindMW:
		mw, ok := lookup[*mwRec](uintptr(C.sr_mw_h((*C.struct_ibv_mw)(w.BindMW))))
		if !ok {
			return bad(syscall.EINVAL)
		}
		s.MW, s.RKey = mw.mw, uint32(w.BindRKey)
		s.BindInfo = verbs.MWBindInfo{Addr: w.BindAddr, Length: w.BindLen, Access: verbs.Access(uint32(w.BindAcc))}
		if w.BindMR != nil {
			mr, ok := lookup[*mrRec](uintptr(C.sr_mr_h((*C.struct_ibv_mr)(w.BindMR))))
			if !ok {
				return bad(syscall.EINVAL)
			}
			s.BindInfo.MR = mr.mr
		}
	default:
		s.RemoteAddr, s.RKey = w.W[0], uint32(w.W[1])
	}
	if r.qp.Type() == verbs.QPTypeUD {
		ahp := *(*unsafe.Pointer)(unsafe.Pointer(&w.W[0]))
		ah, ok := lookup[*ahRec](uintptr(C.sr_ah_h((*C.struct_ibv_ah)(ahp))))
		if !ok {
			return bad(syscall.EINVAL)
		}
		s.AH, s.RemoteQPN, s.RemoteQKey = ah.ah, uint32(w.W[1]), uint32(w.W[1]>>32)
		s.RemoteAddr, s.RKey = 0, 0
	}
	if s.Flags&verbs.SendInline != 0 && (s.Opcode == verbs.WRSend || s.Opcode == verbs.WRSendWithImm ||
		s.Opcode == verbs.WRRDMAWrite || s.Opcode == verbs.WRRDMAWriteWithImm || s.Opcode == verbs.WRSendWithInv) {
		// Inline data is copied now, from wherever it is: it need not be
		// registered, and the lkey is not checked (as providers do).
		if r.inline[k] == nil {
			r.inline[k] = make([]byte, 0, verbs.MaxInline)
		}
		b := r.inline[k][:0]
		for _, e := range sg {
			if uint64(len(b))+uint64(e.Length) > verbs.MaxInline {
				return bad(syscall.EINVAL)
			}
			if e.Length > 0 {
				n := len(b)
				b = b[:n+int(e.Length)]
				if !safeCopy(b[n:], unsafe.Slice((*byte)(unsafe.Add(nil, uintptr(e.Addr))), int(e.Length))) {
					return bad(syscall.EFAULT) // the program's inline data is not mapped
				}
			}
		}
		s.Inline = b
		return 0
	}
	s.SGList = sg
	return 0
}

// ---- AH ----

//export srgo_create_ah
func srgo_create_ah(pdh C.uintptr_t, a *C.struct_ibv_ah_attr, errp *C.int) C.uintptr_t {
	p, ok := lookup[*pdRec](uintptr(pdh))
	if !ok {
		*errp = bad(syscall.EINVAL)
		return 0
	}
	v := ahAttrFromC(a)
	ah, err := p.pd.CreateAH(&v)
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	return addOrFail(&ahRec{ah: ah}, errp, func() { ah.Destroy() })
}

//export srgo_destroy_ah
func srgo_destroy_ah(h C.uintptr_t) C.int {
	r, ok := lookup[*ahRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	if err := r.ah.Destroy(); err != nil {
		return cerr(err)
	}
	handles.remove(uintptr(h))
	return 0
}

//export srgo_mcast
func srgo_mcast(h C.uintptr_t, gid *C.union_ibv_gid, lid C.uint16_t, attach C.int) C.int {
	r, ok := lookup[*qpRec](uintptr(h))
	if !ok {
		return bad(syscall.EINVAL)
	}
	g := verbs.GID(*(*[16]byte)(unsafe.Pointer(gid)))
	if attach != 0 {
		return cerr(r.qp.AttachMcast(g, uint16(lid)))
	}
	return cerr(r.qp.DetachMcast(g, uint16(lid)))
}

// srgo_copy_in copies n bytes of program memory at src to dst (the
// ibv_wr_* setters' copies): EFAULT, not a dead process, when src is not
// mapped.
//
//export srgo_copy_in
func srgo_copy_in(dst, src unsafe.Pointer, n C.size_t) C.int {
	if !safeCopy(unsafe.Slice((*byte)(dst), int(n)), unsafe.Slice((*byte)(src), int(n))) {
		return bad(syscall.EFAULT)
	}
	return 0
}

// safeCopy copies program memory that may not be mapped: false on a fault
// instead of a dead process.
func safeCopy(dst, src []byte) (ok bool) {
	prev := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(prev)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	copy(dst, src)
	return true
}
