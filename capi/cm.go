//go:build linux && cgo && softroce_capi

package main

/*
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include "capi.h"
#include "cm.h"
*/
import "C"

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/internal/toolkit"
	"github.com/softroce/softroce/verbs"
)

// librdmacm over package cm: event channels on eventfds, IDs whose C
// struct rdma_cm_id (struct sr_cm_id) the records below fill in, events
// built in C memory that stay valid until rdma_ack_cm_event frees them.

// cmChanRec is an rdma_cm event channel: package cm's channel, whose fd
// (an eventfd) holds 1 exactly while events wait (cm.EventChannel.SetLevel
// sets and clears it as the agent queues and the program takes them), so
// that the fd is readable as the kernel's ucma file is. Events become C
// events only when the program takes them, on its own thread: no
// goroutine stands between the agent and the program.
type cmChanRec struct {
	ch *cm.EventChannel
	fd int
	// fdSet: the fd's count is 1. Only level reads and writes it, under
	// the channel's lock.
	fdSet bool
	// holding counts the threads handling the link's datagrams in
	// srgo_cm_wait: meanwhile level does not raise the fd. The event such
	// a thread makes is most often the one it then takes itself, and
	// raising the fd for it, then clearing it, cost two system calls an
	// event; the thread brings the fd level with the queue
	// (cm.EventChannel.Relevel) before it returns.
	holding atomic.Int32
	idle    idleWait // the blocking waits of rdma_get_cm_event (srgo_cm_wait)
}

type cmIDRec struct {
	id   *cm.ID
	cptr *C.struct_sr_cm_id
	h    uintptr
	// Under evMu: whether the program has destroyed the ID (no more
	// events count against it then: cptr.delivered, which build adds to
	// under evMu, and cptr.acked, C's).
	dead bool
}

// evMu guards the IDs' dead flags and the counts of events delivered
// against them: rdma_destroy_id (in C) then waits until every event that
// counts against the ID is acknowledged, so that rdma_ack_cm_event never
// touches a freed ID.
var evMu sync.Mutex

// wantAddr is the address the next open of a device must bind (an
// rdma_bind_addr before any context opened it), by device index.
var wantAddr = map[int]netip.Addr{}

// agents are the CM agents of the open devices.
var agents = map[*verbs.Device]*cm.Agent{}

// sockaddrToAddrPort converts a struct sockaddr (IPv4 or IPv6).
func sockaddrToAddrPort(sa *C.struct_sockaddr) (netip.AddrPort, bool) {
	if sa == nil {
		return netip.AddrPort{}, false
	}
	switch sa.sa_family {
	case C.AF_INET:
		sin := (*C.struct_sockaddr_in)(unsafe.Pointer(sa))
		b := *(*[4]byte)(unsafe.Pointer(&sin.sin_addr))
		p := *(*[2]byte)(unsafe.Pointer(&sin.sin_port))
		return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(p[0])<<8|uint16(p[1])), true
	case C.AF_INET6:
		sin := (*C.struct_sockaddr_in6)(unsafe.Pointer(sa))
		b := *(*[16]byte)(unsafe.Pointer(&sin.sin6_addr))
		p := *(*[2]byte)(unsafe.Pointer(&sin.sin6_port))
		return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(p[0])<<8|uint16(p[1])), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes ap into a struct sockaddr_storage.
func putSockaddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) {
	*ss = C.struct_sockaddr_storage{}
	if !ap.Addr().IsValid() {
		return
	}
	port := [2]byte{byte(ap.Port() >> 8), byte(ap.Port())}
	if a := ap.Addr().Unmap(); a.Is4() {
		sin := (*C.struct_sockaddr_in)(unsafe.Pointer(ss))
		sin.sin_family = C.AF_INET
		*(*[2]byte)(unsafe.Pointer(&sin.sin_port)) = port
		*(*[4]byte)(unsafe.Pointer(&sin.sin_addr)) = a.As4()
		return
	}
	sin := (*C.struct_sockaddr_in6)(unsafe.Pointer(ss))
	sin.sin6_family = C.AF_INET6
	*(*[2]byte)(unsafe.Pointer(&sin.sin6_port)) = port
	*(*[16]byte)(unsafe.Pointer(&sin.sin6_addr)) = ap.Addr().As16()
}

// cmDeviceIndex picks the device an ID on address a uses: the open device
// bound to a, else the listed device that owns a (a link's address, or any
// loopback address for the loopback device, which then binds a), else, for
// no address, the first device.
//
//export srgo_cm_device
func srgo_cm_device(sa *C.struct_sockaddr, idx *C.int) C.int {
	loadDevices()
	if devErr != nil || len(devList) == 0 {
		return C.int(syscall.ENODEV)
	}
	ap, _ := sockaddrToAddrPort(sa)
	a := ap.Addr().Unmap()
	devMu.Lock()
	defer devMu.Unlock()
	if !a.IsValid() || a.IsUnspecified() {
		*idx = 0
		return 0
	}
	for i, od := range devsOpen {
		if od.dev.LocalAddr().Addr().Unmap() == a {
			*idx = C.int(i)
			return 0
		}
	}
	envA := netip.Addr{}
	if v := os.Getenv(envAddr); v != "" {
		if ap, err := toolkit.ParseDeviceAddr(v); err == nil {
			envA = ap.Addr().Unmap()
		}
	}
	for i, s := range devList {
		// The loopback device binds whatever loopback or local address an
		// ID names, as the Go tools' -d IP does.
		if s.info.Addr.Addr().Unmap() == a || envA == a || s.auto && (a.IsLoopback() || localAddr(a)) {
			if devsOpen[i] != nil {
				break // open on another address
			}
			wantAddr[i] = a
			*idx = C.int(i)
			return 0
		}
	}
	return C.int(syscall.EADDRNOTAVAIL)
}

// srgo_cm_preopen_device names the device rdma_create_event_channel may
// open ahead of the program's first call (rdmacm.c's sr_cm_preopen): the
// device SOFTROCE_ADDR names, bound to that address, or the first listed
// device if it has an address of its own (a link's). Not the loopback
// device's automatic address: a program's rdma_bind_addr picks that one.
// Non-zero: none (or the device is open already).
//
//export srgo_cm_preopen_device
func srgo_cm_preopen_device(idx *C.int) C.int {
	loadDevices()
	if devErr != nil || len(devList) == 0 {
		return C.int(syscall.ENODEV)
	}
	if v := os.Getenv(envAddr); v != "" {
		ap, err := toolkit.ParseDeviceAddr(v)
		if err != nil {
			return C.int(syscall.EINVAL)
		}
		var ss C.struct_sockaddr_storage
		putSockaddr(&ss, netip.AddrPortFrom(ap.Addr().Unmap(), 0))
		return srgo_cm_device((*C.struct_sockaddr)(unsafe.Pointer(&ss)), idx)
	}
	devMu.Lock()
	defer devMu.Unlock()
	if devList[0].auto || devsOpen[0] != nil {
		return C.int(syscall.ENODEV)
	}
	*idx = 0
	return 0
}

// srgo_cm_attach starts the CM on the device of context h (once).
//
//export srgo_cm_attach
func srgo_cm_attach(h C.uintptr_t) C.int {
	_, d, ok := ctxDev(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	attached := false
	defer func() {
		if attached {
			settleHeap() // after devMu is released
		}
	}()
	devMu.Lock()
	defer devMu.Unlock()
	if agents[d] != nil {
		return 0
	}
	cfg := toolkit.AgentConfig()
	if os.Getenv(envDebug) != "" {
		cfg.Logger = debugLogger()
	}
	a, err := cm.Attach(d, cfg)
	if err != nil {
		warn("rdma_cm on %s: %v", d.Name(), err)
		return cerr(err)
	}
	agents[d] = a
	attached = true
	return 0
}

//export srgo_cm_create_channel
func srgo_cm_create_channel(fd C.int, errp *C.int) C.uintptr_t {
	r := &cmChanRec{ch: cm.NewEventChannel(), fd: int(fd)}
	r.ch.SetLevel(r.level)
	r.ch.SetBacklogOnTake(true) // the kernel's rdma_cm file: the slot comes back with the event
	return addOrFail(r, errp, func() { r.ch.Close() })
}

// level sets (one write) or clears (one read) the fd's count as the queue
// goes from empty to not or back (or, from Relevel, to what it is). Both
// run under the channel's lock, so the count is 0 or 1 and a clearing
// read never blocks.
func (r *cmChanRec) level(ready bool) {
	if ready {
		if r.fdSet || r.holding.Load() > 0 {
			return
		}
		r.fdSet = true
		signalFd(r.fd)
		return
	}
	if !r.fdSet {
		return
	}
	r.fdSet = false
	var b [8]byte
	for {
		if _, err := syscall.Read(r.fd, b[:]); err != syscall.EINTR {
			return
		}
	}
}

//export srgo_cm_destroy_channel
func srgo_cm_destroy_channel(h C.uintptr_t) C.int {
	r, ok := lookup[*cmChanRec](uintptr(h))
	if !ok {
		return C.int(syscall.EINVAL)
	}
	handles.remove(uintptr(h))
	r.ch.Close()
	return 0
}

// build makes the C event for ev; a CONNECT_REQUEST gets a new C ID. An
// event of an ID the program destroyed meanwhile is dropped (nil), as the
// kernel's rdma_destroy_id drops the ID's unread events.
func (r *cmChanRec) build(ev *cm.Event) *C.struct_sr_cm_event {
	rec, _ := ev.ID.Context.(*cmIDRec)
	if ev.Type == cm.EventConnectRequest {
		lrec, ok := ev.Listen.Context.(*cmIDRec)
		if ok && !live(lrec) {
			ok = false
		}
		if !ok {
			ev.ID.Reject(nil)
			return nil
		}
		rec = newPassiveID(ev.ID, lrec)
		if rec == nil {
			ev.ID.Reject(nil)
			return nil
		}
	}
	if rec == nil || !live(rec) {
		return nil
	}
	counted := rec
	if ev.Type == cm.EventConnectRequest {
		counted, _ = ev.Listen.Context.(*cmIDRec)
	}
	evMu.Lock()
	if rec.dead || counted.dead {
		evMu.Unlock()
		if ev.Type == cm.EventConnectRequest {
			ev.ID.Reject(nil)
		}
		return nil
	}
	atomic.AddUint32((*uint32)(unsafe.Pointer(&counted.cptr.delivered)), 1)
	evMu.Unlock()
	if ev.Type == cm.EventEstablished && ev.ID.Listener() != nil {
		// The kernel's rdma_cm reports the passive side's ESTABLISHED
		// (the RTU) with no parameters and no private data.
		ev.Param = cm.ConnParam{}
	}
	ce := (*C.struct_sr_cm_event)(C.calloc(1, C.sizeof_struct_sr_cm_event))
	ce.counted = counted.cptr
	ce.ev.id = &rec.cptr.id
	if ev.Listen != nil {
		if l, ok := ev.Listen.Context.(*cmIDRec); ok {
			ce.ev.listen_id = &l.cptr.id
		}
	}
	ce.ev.event = C.enum_rdma_cm_event_type(ev.Type)
	ce.ev.status = C.int(ev.Status)
	pd := ev.Param.PrivateData
	if ev.UD != nil {
		pd = ev.UD.PrivateData
	}
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&ce.pdata[0])), len(ce.pdata)), pd)
	if ev.Multicast != nil {
		mcastEvent(ce, ev) // cmmcast.go
	} else if ev.UD != nil {
		ud := (*C.struct_rdma_ud_param)(unsafe.Pointer(&ce.ev.param))
		if n > 0 {
			ud.private_data = unsafe.Pointer(&ce.pdata[0])
		}
		ud.private_data_len = C.uint8_t(n)
		ahAttrToC(&ud.ah_attr, &ev.UD.AHAttr)
		ud.qp_num, ud.qkey = C.uint32_t(ev.UD.QPNum), C.uint32_t(ev.UD.QKey)
	} else {
		cp := (*C.struct_rdma_conn_param)(unsafe.Pointer(&ce.ev.param))
		if n > 0 {
			cp.private_data = unsafe.Pointer(&ce.pdata[0])
		}
		cp.private_data_len = C.uint8_t(n)
		cp.responder_resources = C.uint8_t(ev.Param.ResponderResources)
		cp.initiator_depth = C.uint8_t(ev.Param.InitiatorDepth)
		cp.flow_control = cbool(ev.Param.FlowControl)
		cp.retry_count = C.uint8_t(ev.Param.RetryCount)
		cp.rnr_retry_count = C.uint8_t(ev.Param.RNRRetryCount)
		cp.srq = cbool(ev.Param.SRQ)
		cp.qp_num = C.uint32_t(ev.Param.QPNum)
		switch ev.Type {
		case cm.EventConnectRequest, cm.EventConnectResponse, cm.EventEstablished:
			// The peer's ECE, for rdma_get_remote_ece.
			if ev.Type == cm.EventConnectRequest || ev.Param.ECE.VendorID != 0 {
				rec.cptr.remote_ece.vendor_id = C.uint32_t(ev.Param.ECE.VendorID)
				rec.cptr.remote_ece.options = C.uint32_t(ev.Param.ECE.Options)
			}
		}
	}
	// The ID's addresses as the event leaves them.
	putSockaddr(addrSlot(&rec.cptr.id.route.addr.anon0), rec.id.LocalAddr())
	putSockaddr(addrSlot(&rec.cptr.id.route.addr.anon1), rec.id.RemoteAddr())
	putRouteGIDs(rec)
	return ce
}

// putRouteGIDs sets the route's GIDs (the IP addresses, IPv4-mapped) and
// the default P_Key, as librdmacm's ucma_query_route fills
// route.addr.addr.ibaddr on RoCE; an address not known yet leaves its GID
// zero.
func putRouteGIDs(rec *cmIDRec) {
	ib := (*C.struct_rdma_ib_addr)(unsafe.Pointer(&rec.cptr.id.route.addr.addr))
	if a := rec.id.LocalAddr().Addr(); a.IsValid() && !a.IsUnspecified() {
		g := verbs.GIDFromAddr(a)
		*(*[16]byte)(unsafe.Pointer(&ib.sgid)) = g
	}
	if a := rec.id.RemoteAddr().Addr(); a.IsValid() && !a.IsUnspecified() {
		g := verbs.GIDFromAddr(a)
		*(*[16]byte)(unsafe.Pointer(&ib.dgid)) = g
	}
	*(*[2]byte)(unsafe.Pointer(&ib.pkey)) = [2]byte{0xff, 0xff}
}

func cbool(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

// newPassiveID gives an incoming connection's ID its C struct, on the
// listener's channel and context (the device's).
func newPassiveID(id *cm.ID, l *cmIDRec) *cmIDRec {
	c := (*C.struct_sr_cm_id)(C.calloc(1, C.sizeof_struct_sr_cm_id))
	rec := &cmIDRec{id: id, cptr: c}
	rec.h = handles.add(rec)
	if rec.h == 0 {
		C.free(unsafe.Pointer(c))
		return nil
	}
	id.Context = rec
	c.h = C.uintptr_t(rec.h)
	c.id.channel = l.cptr.id.channel
	c.id.context = l.cptr.id.context
	c.id.ps = l.cptr.id.ps
	c.id.qp_type = l.cptr.id.qp_type
	c.id.port_num = 1
	c.conn_started = 1
	idx := -1
	devMu.Lock()
	for i, od := range devsOpen {
		if od.dev == id.Device() {
			idx = i
		}
	}
	devMu.Unlock()
	if idx >= 0 {
		c.id.verbs = C.sr_cm_ctx(C.int(idx))
		c.id.pd = C.sr_cm_pd(C.int(idx))
	}
	return rec
}

// live reports whether the program has not destroyed the ID.
func live(rec *cmIDRec) bool {
	cur, ok := lookup[*cmIDRec](rec.h)
	return ok && cur == rec
}

// srgo_cm_take_event takes the channel's oldest event as a C event: 0, or
// 1 when none waits (the caller then waits for the fd).
//
//export srgo_cm_take_event
func srgo_cm_take_event(h C.uintptr_t, out **C.struct_rdma_cm_event) C.int {
	r, ok := lookup[*cmChanRec](uintptr(h))
	if !ok {
		return C.int(syscall.EINVAL)
	}
	if !r.take(out) {
		return 1
	}
	r.idle.ended(false)
	return 0
}

// take takes the oldest event as a C event into out, if any.
func (r *cmChanRec) take(out **C.struct_rdma_cm_event) bool {
	for {
		ev, ok := r.ch.TryGet()
		if !ok {
			return false
		}
		if ce := r.build(ev); ce != nil {
			*out = &ce.ev
			return true
		}
	}
}

// srgo_cm_wait is a blocking rdma_get_cm_event's wait when no event waits:
// on the link of the device the process's CM runs on (when it runs on
// exactly one) and on the channel's fd together (verbs.Device.WaitLink),
// so that the datagram of a MAD wakes this thread alone, as the kernel's
// ucma file wakes its reader once. What the link then holds this thread
// handles itself (cm.Agent.PollLink), which queues the event without the
// device's and the agent's goroutines in between (a datagram for another
// of the device's QPs is handled here too), and it takes the first event
// itself, into out. It handles what the link holds before it looks at the
// fd's O_NONBLOCK, and waits only when that, and a moment's more looking
// (spin), found nothing. It returns 0
// (out set if it took an event; if not, the caller takes again), EAGAIN
// when the fd is non-blocking and no event came, -2 when a signal
// interrupted the wait, and -1 when it cannot wait on a link (the caller
// waits on the fd alone).
//
//export srgo_cm_wait
func srgo_cm_wait(h C.uintptr_t, out **C.struct_rdma_cm_event) C.int {
	r, ok := lookup[*cmChanRec](uintptr(h))
	if !ok {
		return -1
	}
	a := soleAgent()
	if a == nil || !a.Device().CanPollLink() {
		return -1
	}
	d := a.Device()
	if r.handleLink(a, out) {
		return 0
	}
	if fl, err := unix.FcntlInt(uintptr(r.fd), unix.F_GETFL, 0); err == nil && fl&unix.O_NONBLOCK != 0 {
		return C.int(syscall.EAGAIN)
	}
	if r.spin(a, out) {
		return 0
	}
	link, other, err := d.WaitLink(r.fd, r.idle.bound())
	if err != nil {
		if errors.Is(err, syscall.EINTR) {
			return -2
		}
		return -1
	}
	r.idle.ended(!link && !other)
	r.handleLink(a, out)
	return 0
}

// handleLink handles what the agent's link holds on this thread with the
// fd held back (holding), takes the oldest event into out if one is
// queued, and brings the fd level with what remains.
func (r *cmChanRec) handleLink(a *cm.Agent, out **C.struct_rdma_cm_event) bool {
	r.holding.Add(1)
	a.PollLink()
	r.holding.Add(-1)
	took := r.take(out)
	r.ch.Relevel()
	return took
}

// cmSpin is how long a blocking rdma_get_cm_event looks for work before
// it sleeps (spin).
const cmSpin = 80 * time.Microsecond

// spin looks again, for up to cmSpin, for what the link brings and the
// event it makes (handleLink), giving the CPU away between looks
// (sched_yield: the program's other threads, and with two Go processors
// or more the runtime's goroutines, run meanwhile; with one, the runtime
// gets it only after the spin, when the thread waits: handing it over
// each look slowed stock cmtime, whose other thread then waited for it);
// it reports whether it took an event into out. A thread
// that sleeps at once costs a wake-up per datagram, to the sender (the
// 0-byte datagram of a lane, tens of µs of its processor on the machine
// this was measured on) and to itself (a context switch). Stock cmtime's
// server event thread, which hands each request to another thread and so
// finds nothing to do between two, slept and was woken for about one
// datagram in three. The Go scheduler's idle threads spin before they
// sleep for the same reason.
func (r *cmChanRec) spin(a *cm.Agent, out **C.struct_rdma_cm_event) bool {
	for t0 := time.Now(); time.Since(t0) < cmSpin; {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if r.handleLink(a, out) {
			return true
		}
	}
	return false
}

// soleAgent returns the CM agent when exactly one device runs one.
func soleAgent() *cm.Agent {
	devMu.Lock()
	defer devMu.Unlock()
	if len(agents) != 1 {
		return nil
	}
	for _, a := range agents {
		return a
	}
	return nil
}

//export srgo_cm_create_id
func srgo_cm_create_id(chh C.uintptr_t, c *C.struct_sr_cm_id, ps C.int, errp *C.int) C.uintptr_t {
	r, ok := lookup[*cmChanRec](uintptr(chh))
	if !ok {
		*errp = C.int(syscall.EINVAL)
		return 0
	}
	id, err := r.ch.CreateID(nil, mad.PortSpace(ps))
	if err != nil {
		*errp = cerr(err)
		return 0
	}
	rec := &cmIDRec{id: id, cptr: c}
	id.Context = rec
	rec.h = uintptr(addOrFail(rec, errp, func() { id.Destroy() }))
	return C.uintptr_t(rec.h)
}

//export srgo_cm_destroy_id
func srgo_cm_destroy_id(h C.uintptr_t) C.int {
	r, ok := lookup[*cmIDRec](uintptr(h))
	if !ok {
		return C.int(syscall.EINVAL)
	}
	evMu.Lock()
	if r.dead {
		evMu.Unlock()
		return C.int(syscall.EINVAL)
	}
	r.dead = true
	evMu.Unlock()
	return cerr(r.id.Destroy())
}

// srgo_cm_forget forgets a destroyed ID's handle, once the program has
// acknowledged its events (rdma_destroy_id).
//
//export srgo_cm_forget
func srgo_cm_forget(h C.uintptr_t) {
	if _, ok := lookup[*cmIDRec](uintptr(h)); ok {
		handles.remove(uintptr(h))
	}
}

func cmID(h C.uintptr_t) (*cmIDRec, bool) { return lookup[*cmIDRec](uintptr(h)) }

//export srgo_cm_bind
func srgo_cm_bind(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	ap, ok := sockaddrToAddrPort(sa)
	if !ok {
		return C.int(syscall.EAFNOSUPPORT)
	}
	if err := r.id.BindAddr(ap); err != nil {
		return cerr(err)
	}
	putSockaddr(addrSlot(&r.cptr.id.route.addr.anon0), r.id.LocalAddr())
	return 0
}

//export srgo_cm_resolve_addr
func srgo_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_sockaddr, ms C.int) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	s, _ := sockaddrToAddrPort(src)
	d, ok := sockaddrToAddrPort(dst)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	if !s.IsValid() {
		// No source: the device's own address (one device per process).
		if a := firstAgentAddr(); a.IsValid() {
			s = netip.AddrPortFrom(a, 0)
		}
	}
	putSockaddr(addrSlot(&r.cptr.id.route.addr.anon1), d)
	return cerr(r.id.ResolveAddr(s, d, time.Duration(ms)*time.Millisecond))
}

// firstAgentAddr is the address of an attached device, preferring the
// first listed.
func firstAgentAddr() netip.Addr {
	devMu.Lock()
	defer devMu.Unlock()
	for i := range devList {
		if od := devsOpen[i]; od != nil && agents[od.dev] != nil {
			return od.dev.LocalAddr().Addr()
		}
	}
	return netip.Addr{}
}

//export srgo_cm_resolve_route
func srgo_cm_resolve_route(h C.uintptr_t, ms C.int) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.ResolveRoute(time.Duration(ms) * time.Millisecond))
}

//export srgo_cm_listen
func srgo_cm_listen(h C.uintptr_t, backlog C.int) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	if backlog <= 0 || int(backlog) > toolkit.ListenBacklog() {
		backlog = C.int(toolkit.ListenBacklog()) // as the kernel's rdma_cm file
	}
	if err := r.id.Listen(int(backlog)); err != nil {
		return cerr(err)
	}
	putSockaddr(addrSlot(&r.cptr.id.route.addr.anon0), r.id.LocalAddr())
	return 0
}

func connParam(p *C.struct_rdma_conn_param) *cm.ConnParam {
	if p == nil {
		return nil
	}
	cp := &cm.ConnParam{ResponderResources: uint8(p.responder_resources), InitiatorDepth: uint8(p.initiator_depth),
		FlowControl: p.flow_control != 0, RetryCount: uint8(p.retry_count), RNRRetryCount: uint8(p.rnr_retry_count),
		SRQ: p.srq != 0, QPNum: uint32(p.qp_num)}
	if p.private_data != nil && p.private_data_len > 0 {
		cp.PrivateData = C.GoBytes(p.private_data, C.int(p.private_data_len))
	}
	return cp
}

// maxRd is the device's max_qp_rd_atom and max_qp_init_rd_atom (rxe's),
// what librdmacm takes for a connection's RDMA READ and atomic depths
// when the program leaves them to it.
const maxRd = 128

// validRd is librdmacm's ucma_valid_param: on an RC (TCP port space) ID,
// no parameters need a QP of the ID's own, and a depth above the device's
// is refused unless it is RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xFF:
// the device's).
func validRd(r *cmIDRec, p *C.struct_rdma_conn_param) bool {
	if r.cptr.id.ps != C.RDMA_PS_TCP {
		return true
	}
	if p == nil {
		return r.cptr.id.qp != nil
	}
	return (p.responder_resources == 0xFF || p.responder_resources <= maxRd) &&
		(p.initiator_depth == 0xFF || p.initiator_depth <= maxRd)
}

//export srgo_cm_connect
func srgo_cm_connect(h C.uintptr_t, p *C.struct_rdma_conn_param, vendor, options C.uint32_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	if !validRd(r, p) {
		return C.int(syscall.EINVAL)
	}
	// As librdmacm's rdma_connect: the device's depths when the program
	// gives no parameters or asks for the maximum (0xFF), retry counts 7
	// with no parameters.
	cp := connParam(p)
	if cp == nil {
		cp = &cm.ConnParam{ResponderResources: maxRd, InitiatorDepth: maxRd, RetryCount: 7, RNRRetryCount: 7}
	} else {
		if p.responder_resources == 0xFF {
			cp.ResponderResources = maxRd
		}
		if p.initiator_depth == 0xFF {
			cp.InitiatorDepth = maxRd
		}
	}
	return cerr(r.id.Connect(withECE(cp, vendor, options)))
}

// withECE adds ECE to a connection's parameters (cp is never nil: connect
// and accept fill in librdmacm's defaults first).
func withECE(cp *cm.ConnParam, vendor, options C.uint32_t) *cm.ConnParam {
	if vendor != 0 || options != 0 {
		cp.ECE = cm.ECE{VendorID: uint32(vendor), Options: uint32(options)}
	}
	return cp
}

//export srgo_cm_accept
func srgo_cm_accept(h C.uintptr_t, p *C.struct_rdma_conn_param, vendor, options C.uint32_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	if !validRd(r, p) {
		return C.int(syscall.EINVAL)
	}
	// As librdmacm's rdma_accept: with no parameters, or 0xFF, the depths
	// the request offered (DefaultAcceptParam), at most the device's.
	def := r.id.DefaultAcceptParam()
	def.ResponderResources, def.InitiatorDepth = min(def.ResponderResources, maxRd), min(def.InitiatorDepth, maxRd)
	cp := connParam(p)
	if cp == nil {
		def.RetryCount = 7
		cp = def
	} else {
		if p.responder_resources == 0xFF {
			cp.ResponderResources = def.ResponderResources
		}
		if p.initiator_depth == 0xFF {
			cp.InitiatorDepth = def.InitiatorDepth
		}
	}
	return cerr(r.id.Accept(withECE(cp, vendor, options)))
}

//export srgo_cm_reject
func srgo_cm_reject(h C.uintptr_t, pdata unsafe.Pointer, n C.uint8_t, reason C.int) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	var b []byte
	if pdata != nil && n > 0 {
		b = C.GoBytes(pdata, C.int(n))
	}
	return cerr(r.id.RejectReason(b, mad.RejectReason(reason)))
}

//export srgo_cm_disconnect
func srgo_cm_disconnect(h C.uintptr_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.Disconnect())
}

//export srgo_cm_establish
func srgo_cm_establish(h C.uintptr_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.Establish())
}

//export srgo_cm_migrate
func srgo_cm_migrate(h, chh C.uintptr_t) C.int {
	r, ok := cmID(h)
	ch, ok2 := lookup[*cmChanRec](uintptr(chh))
	if !ok || !ok2 {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.Migrate(ch.ch))
}

//export srgo_cm_set_tos
func srgo_cm_set_tos(h C.uintptr_t, tos C.uint8_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.SetTOS(uint8(tos)))
}

//export srgo_cm_set_ack_timeout
func srgo_cm_set_ack_timeout(h C.uintptr_t, t C.uint8_t) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.SetACKTimeout(uint8(t)))
}

//export srgo_cm_init_qp_attr
func srgo_cm_init_qp_attr(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask *C.int) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	v, m, err := r.id.InitQPAttr(verbs.QPState(a.qp_state))
	if err != nil {
		return cerr(err)
	}
	st := a.qp_state
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = st
	a.path_mtu = C.enum_ibv_mtu(v.PathMTU)
	a.qkey = C.uint32_t(v.QKey)
	a.rq_psn, a.sq_psn, a.dest_qp_num = C.uint32_t(v.RQPSN), C.uint32_t(v.SQPSN), C.uint32_t(v.DestQPNum)
	a.qp_access_flags = C.uint(v.QPAccessFlags)
	ahAttrToC(&a.ah_attr, &v.AHAttr)
	a.pkey_index = C.uint16_t(v.PKeyIndex)
	a.max_rd_atomic, a.max_dest_rd_atomic = C.uint8_t(v.MaxRdAtomic), C.uint8_t(v.MaxDestRdAtomic)
	a.min_rnr_timer, a.port_num, a.timeout = C.uint8_t(v.MinRNRTimer), C.uint8_t(v.PortNum), C.uint8_t(v.Timeout)
	a.retry_cnt, a.rnr_retry = C.uint8_t(v.RetryCnt), C.uint8_t(v.RNRRetry)
	*mask = C.int(m)
	return 0
}

// srgo_cm_create_qp creates the ID's QP (rdma_create_qp) through the CM,
// which moves it along with the connection, and gives it its C handle as
// srgo_create_qp does.
//
//export srgo_cm_create_qp
func srgo_cm_create_qp(h, pdh C.uintptr_t, a *C.struct_ibv_qp_init_attr, flags C.uint32_t, scq, rcq, srqh C.uintptr_t, cqp *C.struct_ibv_qp,
	qpn *C.uint32_t, errp *C.int) C.uintptr_t {
	r, ok := cmID(h)
	if !ok {
		*errp = C.int(syscall.EINVAL)
		return 0
	}
	return createQP(pdh, a, flags, scq, rcq, srqh, cqp, qpn, errp, func(pd *verbs.PD, ia *verbs.QPInitAttr) (*verbs.QP, error) {
		return r.id.CreateQP(pd, ia)
	})
}

//export srgo_cm_destroy_qp
func srgo_cm_destroy_qp(h, qph C.uintptr_t, async *C.uint32_t) C.int {
	r, ok := cmID(h)
	q, ok2 := lookup[*qpRec](uintptr(qph))
	if !ok || !ok2 {
		return C.int(syscall.EINVAL)
	}
	if err := r.id.DestroyQP(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return cerr(err)
	}
	handles.remove(uintptr(qph))
	q.ctx.dropEvents(q)
	*async = C.uint32_t(q.asyncReported.Load())
	return 0
}

// addrSlot views one of struct rdma_addr's anonymous unions as the
// sockaddr_storage it is.
func addrSlot(b *[128]byte) *C.struct_sockaddr_storage {
	return (*C.struct_sockaddr_storage)(unsafe.Pointer(b))
}

// localAddr reports whether a is an address of one of the host's
// interfaces.
func localAddr(a netip.Addr) bool {
	host, err := toolkit.HostInterfaces()
	return err == nil && toolkit.IfaceWithAddr(host, a) != nil
}
