//go:build linux && cgo && softroce_capi

package main

/*
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

int sr_rs_device(struct sockaddr *sa);
*/
import "C"

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/rsocket"
)

// rsockets (rsocket.c's C half): each socket is an eventfd whose number
// the program uses; rsocks maps it to the socket.

type rsock struct {
	fd     int
	domain int
	idle   idleWait // the blocking waits on the socket (srgo_rs_wait)

	mu       sync.Mutex
	cfg      rsocket.Config
	bound    netip.AddrPort
	nonblock bool
	flags    int // F_GETFL's value
	l        *rsocket.Listener
	c        *rsocket.Conn
	dgram    bool                // SOCK_DGRAM
	pc       *rsocket.PacketConn // a datagram socket's, once bound, connected or sent from
	dialing  bool
	dialDone chan struct{}
	// dialStop ends the dial in progress (rclose); dialFailed: the
	// last connect failed (a new rconnect is ENOTCONN, as librdmacm's
	// rs_connect_error state).
	dialStop   context.CancelFunc
	dialFailed bool
	soErr      syscall.Errno // SO_ERROR, cleared when read
	so         map[[2]int]int
	keepIdle   int
}

var rsocks sync.Map // int -> *rsock

func rsLookup(fd C.int) (*rsock, bool) {
	v, ok := rsocks.Load(int(fd))
	if !ok {
		return nil, false
	}
	return v.(*rsock), true
}

// rsConnected returns the rsocket fd names and its connection, or the
// errno a call on it fails with: EBADF for no rsocket, else what
// rsock.conn says (ENOTCONN, EAGAIN while a non-blocking connect runs).
func rsConnected(fd C.int) (*rsock, *rsocket.Conn, syscall.Errno) {
	r, ok := rsLookup(fd)
	if !ok {
		return nil, nil, syscall.EBADF
	}
	c, e := r.conn()
	return r, c, e
}

// srgo_rs_block waits for a blocking rrecv or rsend that found nothing to
// do (rsocket.c's sr_rs_block): on the socket's device link, so that the
// datagram that answers it wakes this thread alone and it handles it
// itself (the next call polls the link: rsocket's poll mode), and on the
// socket's eventfd (bit 0 of the result: readable; the caller clears it),
// which the device's goroutine writes at a completion (bit 1: the link is
// readable). -1: the link cannot be waited on; the caller waits on the
// eventfd alone.
//
//export srgo_rs_block
func srgo_rs_block(fd C.int) C.int { return srgo_rs_wait(fd, -1) }

// srgo_rs_wait is srgo_rs_block for rpoll's wait on a single rsocket, at
// most ms milliseconds (the socket's idleWait bound when ms < 0 or longer). It returns
// bit 0 for the socket's eventfd, bit 1 for the device's link, -2 when a
// signal interrupted the wait, -1 when it could not wait.
//
//export srgo_rs_wait
func srgo_rs_wait(fd C.int, ms C.int) C.int {
	rs, c, _ := rsConnected(fd)
	if c == nil {
		return -1
	}
	d := rs.idle.bound()
	capped := ms >= 0 && time.Duration(ms)*time.Millisecond < d
	if capped {
		d = time.Duration(ms) * time.Millisecond
	}
	// Spin first, polling the device's link, as rsocket.c polls its CQ
	// for polling_time before it blocks: an answer within that time is
	// taken without the thread sleeping and being woken.
	if dev := c.CM().QP.Device(); dev.CanPollLink() && ms != 0 {
		for end := time.Now().Add(rsPollingTime); time.Now().Before(end); {
			if dev.PollLink() > 0 {
				return 2 // the next call looks
			}
		}
	}
	link, other, err := c.WaitLink(int(fd), d)
	if errors.Is(err, syscall.EINTR) {
		return -2 // a signal: the blocking call returns EINTR
	}
	if err != nil {
		return -1
	}
	if !capped {
		rs.idle.ended(!link && !other)
	}
	var r C.int
	if other {
		r |= 1
	}
	if link {
		r |= 2
	}
	return r
}

// rsPollingTime is how long a blocking rsocket call polls the device's
// link before it sleeps (srgo_rs_wait): librdmacm's default polling_time.
// Stock rstream -T b's 64-byte transfer took 8.4-11.2 µs with it against
// 31.7-34.2 µs without (alternated, quiet VM), its 1 MiB transfers the same.
const rsPollingTime = 10 * time.Microsecond

// rsPolledLink is the bit srgo_rs_poll adds to revents when it polled the
// device's socket (SR_RS_POLLED_LINK in rsocket.c).
const rsPolledLink = 0x10000

// rsBlockWait bounds one wait of a blocking rsocket call, and of a blocking
// ibv_get_cq_event or rdma_get_cm_event (they wait again), after anything
// happened: a lost wake-up costs at most this. Closing the device wakes a
// waiting thread at once (the socket is shut down). Waits that end with
// nothing grow longer (idleWait).
const rsBlockWait = 100 * time.Millisecond

// maxIdleWait is the longest wait of an idle thread (idleWait).
const maxIdleWait = 1600 * time.Millisecond

// idleWait is how long a program thread's blocking wait sleeps at once:
// rsBlockWait after anything happened, twice as long after each wait that
// ended with nothing, up to maxIdleWait. Each wait that ends brings the
// thread back into the Go runtime, whose monitor thread (sysmon) it then
// wakes from its deep sleep, with a spare thread: with every wait at
// 100 ms, an idle rping or cmtime server on the library took about 5 ms of
// CPU and 180 context switches a second on a VM, where a Go program
// waiting for the same takes none. The zero value starts at rsBlockWait.
type idleWait struct{ d atomic.Int64 }

// bound is the next wait's longest.
func (w *idleWait) bound() time.Duration {
	if d := time.Duration(w.d.Load()); d > 0 {
		return d
	}
	return rsBlockWait
}

// ended records how a wait ended: idle (nothing came) makes the next one
// longer, anything else starts again from rsBlockWait.
func (w *idleWait) ended(idle bool) {
	if !idle {
		if w.d.Load() != 0 {
			w.d.Store(0)
		}
		return
	}
	w.d.Store(int64(min(2*w.bound(), maxIdleWait)))
}

// wake writes the socket's eventfd: rpoll re-checks it.
func (r *rsock) wake() {
	var one = [8]byte{1}
	unix.Write(r.fd, one[:])
}

func rsErrno(err error) syscall.Errno {
	if e, ok := err.(*rsocket.Error); ok && e.Errno != 0 {
		return e.Errno // EAGAIN of a non-blocking call: no errors.Is walk per spin
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, os.ErrDeadlineExceeded):
		return syscall.EAGAIN
	case errors.Is(err, net.ErrClosed):
		return syscall.EBADF
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return errnoOf(err, syscall.EIO)
}

//export srgo_rs_is
func srgo_rs_is(fd C.int) C.int {
	if _, ok := rsLookup(fd); ok {
		return 1
	}
	return 0
}

//export srgo_rs_socket
func srgo_rs_socket(domain, typ, proto C.int) C.int {
	if domain != C.AF_INET && domain != C.AF_INET6 {
		return -C.int(syscall.ENOTSUP)
	}
	dgram := typ == C.SOCK_DGRAM
	if !(typ == C.SOCK_STREAM && (proto == 0 || proto == C.IPPROTO_TCP)) && !(dgram && (proto == 0 || proto == C.IPPROTO_UDP)) {
		return -C.int(syscall.ENOTSUP)
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -C.int(errnoOf(err, syscall.EMFILE))
	}
	r := &rsock{fd: fd, domain: int(domain), dgram: dgram, so: map[[2]int]int{}}
	rsocks.Store(fd, r)
	return C.int(fd)
}

// packet returns the datagram socket's PacketConn, opening it (bound to
// the device's address, any port) on first use (ds_init_ep); r.mu held.
func (r *rsock) packet() (*rsocket.PacketConn, syscall.Errno) {
	if r.pc != nil {
		return r.pc, 0
	}
	if err := C.sr_rs_device(nil); err != 0 {
		return nil, syscall.Errno(err)
	}
	src := firstSrc()
	r.cfg.Src = src
	pc, err := rsocket.ListenPacket(netip.AddrPortFrom(src, 0).String(), &r.cfg)
	if err != nil {
		return nil, rsErrno(err)
	}
	r.setPacket(pc)
	return pc, 0
}

func (r *rsock) setPacket(pc *rsocket.PacketConn) {
	pc.SetNonblock(r.nonblock)
	pc.SetNotify(r.wake)
	r.pc = pc
}

// dgramSock returns fd's datagram socket, or nil if fd is not one.
func dgramSock(fd C.int) *rsock {
	r, ok := rsLookup(fd)
	if !ok || !r.dgram {
		return nil
	}
	return r
}

//export srgo_rs_bind
func srgo_rs_bind(fd C.int, sa *C.struct_sockaddr) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	ap, ok := sockaddrToAddrPort(sa)
	if !ok {
		return C.int(syscall.EAFNOSUPPORT)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var err C.int
	if ap.Addr().IsUnspecified() {
		err = C.sr_rs_device(nil)
	} else {
		err = C.sr_rs_device(sa)
	}
	if err != 0 {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.l != nil || r.c != nil || r.dialing || r.pc != nil {
		return C.int(syscall.EINVAL)
	}
	if r.dgram {
		if !ap.Addr().IsUnspecified() && !ap.Addr().IsLoopback() {
			r.cfg.Src = ap.Addr()
		} else {
			r.cfg.Src = firstSrc()
		}
		pc, err := rsocket.ListenPacket(ap.String(), &r.cfg)
		if err != nil {
			return C.int(rsErrno(err))
		}
		r.setPacket(pc)
	}
	r.bound = ap
	return 0
}

//export srgo_rs_listen
func srgo_rs_listen(fd C.int, backlog C.int) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dgram {
		return C.int(syscall.EOPNOTSUPP)
	}
	if r.l != nil {
		return 0
	}
	if r.c != nil || r.dialing {
		return C.int(syscall.EINVAL)
	}
	if !r.bound.IsValid() {
		if err := C.sr_rs_device(nil); err != 0 {
			return err
		}
		r.bound = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	l, err := rsocket.ListenBacklog(nil, r.bound.String(), int(backlog), &r.cfg)
	if err != nil {
		return C.int(rsErrno(err))
	}
	l.SetNonblock(r.nonblock)
	l.SetNotify(r.wake)
	r.l = l
	return 0
}

// newConnSock makes an rsocket of a connection.
func newConnSock(c *rsocket.Conn, from *rsock) (C.int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return 0, err
	}
	r := &rsock{fd: fd, domain: from.domain, cfg: from.cfg, c: c, so: map[[2]int]int{}, keepIdle: from.keepIdle}
	for k, v := range from.so {
		r.so[k] = v
	}
	c.SetNotify(r.wake)
	rsocks.Store(fd, r)
	return C.int(fd), nil
}

// srgo_rs_accept takes a connection ready on a listening rsocket, without
// waiting: -EAGAIN when none is, with *wait set when the listener blocks
// (raccept then waits in C on the listener's eventfd and calls again).
//
//export srgo_rs_accept
func srgo_rs_accept(fd C.int, wait *C.int) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return -C.int(syscall.EBADF)
	}
	r.mu.Lock()
	l, nb := r.l, r.nonblock
	r.mu.Unlock()
	if l == nil {
		return -C.int(syscall.EBADF) // librdmacm: not listening
	}
	c, err := l.AcceptRS(doneCtx)
	if errors.Is(err, context.Canceled) {
		if !nb {
			*wait = 1
		}
		return -C.int(syscall.EAGAIN)
	}
	if err != nil {
		return -C.int(rsErrno(err))
	}
	nfd, err := newConnSock(c, r)
	if err != nil {
		c.Close()
		return -C.int(errnoOf(err, syscall.EMFILE))
	}
	return nfd
}

// doneCtx is a context already done: AcceptRS with it takes a ready
// connection or returns at once.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// firstSrc is the address a connection dials from when unbound.
func firstSrc() netip.Addr {
	if a := firstAgentAddr(); a.IsValid() {
		return a.Unmap()
	}
	return netip.Addr{}
}

//export srgo_rs_connect
func srgo_rs_connect(fd C.int, sa *C.struct_sockaddr) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	dst, ok := sockaddrToAddrPort(sa)
	if !ok {
		return C.int(syscall.EAFNOSUPPORT)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	r.mu.Lock()
	if r.dgram {
		defer r.mu.Unlock()
		pc, e := r.packet()
		if pc == nil {
			return C.int(e)
		}
		return C.int(rsErrno(pc.Connect(dst)))
	}
	// As librdmacm's rs_do_connect called again: 0 once connected (a
	// program calls until it gets 0), EINPROGRESS while connecting,
	// ENOTCONN after a failed attempt.
	switch {
	case r.c != nil:
		r.mu.Unlock()
		return 0
	case r.dialing:
		r.mu.Unlock()
		return C.int(syscall.EINPROGRESS)
	case r.dialFailed:
		r.mu.Unlock()
		return C.int(syscall.ENOTCONN)
	case r.l != nil:
		r.mu.Unlock()
		return C.int(syscall.EINVAL)
	}
	if !r.bound.IsValid() || r.bound.Addr().IsUnspecified() {
		if err := C.sr_rs_device(nil); err != 0 {
			r.mu.Unlock()
			return err
		}
		r.cfg.Src = firstSrc()
	} else {
		r.cfg.Src = r.bound.Addr()
	}
	cfg := r.cfg
	r.dialing = true
	r.dialDone = make(chan struct{})
	done := r.dialDone
	nb := r.nonblock
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r.dialStop = cancel
	r.mu.Unlock()
	go func() {
		defer cancel()
		c, err := rsocket.Dial(ctx, dst.String(), &cfg)
		r.mu.Lock()
		r.dialing = false
		if err != nil {
			r.soErr = rsErrno(err)
			r.dialFailed = true
		} else {
			r.c = c
			c.SetNonblock(r.nonblock)
			c.SetNotify(r.wake)
			if r.keepIdle > 0 && r.so[[2]int{C.SOL_SOCKET, C.SO_KEEPALIVE}] != 0 {
				c.SetKeepAlive(time.Duration(r.keepIdle) * time.Second)
			}
		}
		r.mu.Unlock()
		r.wake() // before done: rclose waits for it, then closes the eventfd
		close(done)
	}()
	if nb {
		return C.int(syscall.EINPROGRESS)
	}
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		e := r.soErr
		r.soErr = 0
		return C.int(e)
	}
	return 0
}

// conn returns the socket's connection, or the errno of an rsocket call
// on a socket that has none.
func (r *rsock) conn() (*rsocket.Conn, syscall.Errno) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		return r.c, 0
	}
	if r.dialing {
		return nil, syscall.EAGAIN // librdmacm: EINPROGRESS becomes EAGAIN
	}
	return nil, syscall.ENOTCONN
}

// blockFlags turns a blocking call's flags into a non-blocking one's that
// does not park (rsocket.MsgNoPark) and sets *wait: the C side then waits
// in poll(2) on the socket's eventfd, which the device's goroutine writes
// when a completion comes, and calls again. wait is nil for a caller that
// cannot wait in C.
func (r *rsock) blockFlags(flags C.int, wait *C.int) int {
	f := int(flags)
	r.mu.Lock()
	nb := r.nonblock
	r.mu.Unlock()
	if wait != nil && !nb && f&C.MSG_DONTWAIT == 0 {
		*wait = 1
		f |= rsocket.MsgDontWait | rsocket.MsgNoPark
	}
	return f
}

//export srgo_rs_recvfrom
func srgo_rs_recvfrom(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, sa *C.struct_sockaddr, salen *C.socklen_t) C.ssize_t {
	r := dgramSock(fd)
	if r == nil {
		return -C.ssize_t(syscall.EBADF)
	}
	r.mu.Lock()
	pc := r.pc
	dom := r.domain
	r.mu.Unlock()
	if pc == nil {
		return -C.ssize_t(syscall.EINVAL) // not readable before bind, connect or sendto (ds_recvfrom)
	}
	k, src, err := pc.RecvFrom(unsafe.Slice((*byte)(buf), int(n)), int(flags))
	if err != nil {
		return -C.ssize_t(rsErrno(err))
	}
	if sa != nil && salen != nil {
		putName(sa, salen, src, dom)
	}
	return C.ssize_t(k)
}

//export srgo_rs_sendto
func srgo_rs_sendto(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, sa *C.struct_sockaddr) C.ssize_t {
	r, ok := rsLookup(fd)
	if !ok {
		return -C.ssize_t(syscall.EBADF)
	}
	if !r.dgram {
		if sa != nil {
			return -C.ssize_t(syscall.EISCONN)
		}
		return srgo_rs_send(fd, buf, n, flags, nil)
	}
	var dst netip.AddrPort
	if sa != nil {
		var ok bool
		if dst, ok = sockaddrToAddrPort(sa); !ok {
			return -C.ssize_t(syscall.EAFNOSUPPORT)
		}
	}
	r.mu.Lock()
	pc, e := r.packet()
	r.mu.Unlock()
	if pc == nil {
		return -C.ssize_t(e)
	}
	k, err := pc.SendTo(unsafe.Slice((*byte)(buf), int(n)), dst, int(flags))
	if err != nil {
		return -C.ssize_t(rsErrno(err))
	}
	return C.ssize_t(k)
}

//export srgo_rs_recv
func srgo_rs_recv(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, wait *C.int) C.ssize_t {
	if dgramSock(fd) != nil {
		return srgo_rs_recvfrom(fd, buf, n, flags, nil, nil)
	}
	r, c, e := rsConnected(fd)
	if c == nil {
		return -C.ssize_t(e)
	}
	if n == 0 {
		return 0
	}
	k, err := c.Recv(unsafe.Slice((*byte)(buf), int(n)), r.blockFlags(flags, wait))
	if err != nil && k == 0 {
		if err == io.EOF {
			return 0
		}
		return -C.ssize_t(rsErrno(err))
	}
	return C.ssize_t(k)
}

//export srgo_rs_send
func srgo_rs_send(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, wait *C.int) C.ssize_t {
	if dgramSock(fd) != nil {
		return srgo_rs_sendto(fd, buf, n, flags, nil)
	}
	r, c, e := rsConnected(fd)
	if c == nil {
		return -C.ssize_t(e)
	}
	if n == 0 {
		return 0
	}
	k, err := c.Send(unsafe.Slice((*byte)(buf), int(n)), r.blockFlags(flags, wait))
	if err != nil && k == 0 {
		return -C.ssize_t(rsErrno(err))
	}
	return C.ssize_t(k)
}

//export srgo_rs_sendv
func srgo_rs_sendv(fd C.int, iov *C.struct_iovec, cnt C.int, flags C.int) C.ssize_t {
	if cnt <= 0 {
		return 0
	}
	var total C.ssize_t
	for _, v := range unsafe.Slice(iov, int(cnt)) {
		if v.iov_len == 0 {
			continue
		}
		k := srgo_rs_send(fd, v.iov_base, v.iov_len, flags, nil)
		if k < 0 {
			if total > 0 {
				return total
			}
			return k
		}
		total += k
		if C.size_t(k) < v.iov_len {
			break
		}
	}
	return total
}

//export srgo_rs_shutdown
func srgo_rs_shutdown(fd C.int, how C.int) C.int {
	if dgramSock(fd) != nil {
		return 0
	}
	r, c, e := rsConnected(fd)
	if c == nil {
		return C.int(e)
	}
	c.Shutdown(int(how)) // as librdmacm: a socket already down is no error
	r.wake()
	return 0
}

//export srgo_rs_close
func srgo_rs_close(fd C.int) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	rsocks.Delete(int(fd))
	r.mu.Lock()
	done, stop := r.dialDone, r.dialStop
	r.mu.Unlock()
	if done != nil {
		// As librdmacm's rclose, which frees a connecting socket at once:
		// end the dial, then wait for its goroutine's last wake.
		stop()
		<-done
	}
	r.mu.Lock()
	l, c, pc := r.l, r.c, r.pc
	r.l, r.c, r.pc = nil, nil, nil
	r.mu.Unlock()
	if pc != nil {
		pc.Close()
	}
	if l != nil {
		l.Close()
	}
	if c != nil {
		c.Close()
	}
	return 0
}

// srgo_rs_poll reports an rsocket's revents for rpoll; with link, a
// connection that finds nothing ready first polls its device's socket, and
// rsPolledLink in the result says so (rpoll then polls no more sockets of
// the round: one system call per round, not per rsocket).
//
//export srgo_rs_poll
func srgo_rs_poll(fd C.int, events C.short, arm, link C.int) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return -1
	}
	r.mu.Lock()
	l, c, dialing, soErr, pc := r.l, r.c, r.dialing, r.soErr, r.pc
	r.mu.Unlock()
	switch {
	case pc != nil:
		return C.int(pc.Poll(int(events), arm != 0))
	case r.dgram:
		return C.int(int(events) & rsocket.PollOut)
	case l != nil:
		return C.int(l.Poll(int(events)))
	case c != nil:
		rev, polled := c.PollLinked(int(events), arm != 0, link != 0)
		if polled {
			rev |= rsPolledLink
		}
		return C.int(rev)
	case dialing:
		return 0
	case soErr != 0: // a failed connect: rs_connect_error
		return C.int(int(events)&(rsocket.PollIn|rsocket.PollOut) | rsocket.PollErr)
	}
	return 0
}

//export srgo_rs_name
func srgo_rs_name(fd C.int, peer C.int, sa *C.struct_sockaddr, n *C.socklen_t) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	if sa == nil || n == nil {
		return C.int(syscall.EFAULT)
	}
	r.mu.Lock()
	var ap netip.AddrPort
	switch {
	case r.pc != nil && peer != 0:
		ra := r.pc.RemoteAddr()
		if ra == nil {
			r.mu.Unlock()
			return C.int(syscall.ENOTCONN)
		}
		ap = ra.(rsocket.Addr).AddrPort
	case r.pc != nil:
		ap = r.pc.LocalAddr().(rsocket.Addr).AddrPort
	case r.c != nil && peer != 0:
		ap = r.c.RemoteAddr().(rsocket.Addr).AddrPort
	case r.c != nil:
		ap = r.c.LocalAddr().(rsocket.Addr).AddrPort
	case r.l != nil && peer == 0:
		ap = r.l.Addr().(rsocket.Addr).AddrPort
	case peer == 0:
		ap = r.bound
	default:
		r.mu.Unlock()
		return C.int(syscall.ENOTCONN)
	}
	dom := r.domain
	r.mu.Unlock()
	putName(sa, n, ap, dom)
	return 0
}

// putName writes ap into sa (*n bytes at most) as a socket of domain dom
// reports it, and sets *n to its full length.
func putName(sa *C.struct_sockaddr, n *C.socklen_t, ap netip.AddrPort, dom int) {
	var ss C.struct_sockaddr_storage
	if dom == C.AF_INET6 && ap.Addr().Is4() {
		ap = netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
	}
	putSockaddr(&ss, ap)
	size := C.socklen_t(C.sizeof_struct_sockaddr_in)
	if ss.ss_family == C.AF_INET6 {
		size = C.sizeof_struct_sockaddr_in6
	}
	if !ap.Addr().IsValid() {
		ss.ss_family = C.sa_family_t(dom)
	}
	C.memcpy(unsafe.Pointer(sa), unsafe.Pointer(&ss), C.size_t(min(size, *n)))
	*n = size
}

func optInt(v unsafe.Pointer, n C.socklen_t) (int, bool) {
	if v == nil || n < 4 {
		return 0, false
	}
	return int(*(*C.int)(v)), true
}

//export srgo_rs_setsockopt
func srgo_rs_setsockopt(fd C.int, level, name C.int, v unsafe.Pointer, n C.socklen_t) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	val, ok := optInt(v, n)
	if !ok && !(level == C.SOL_SOCKET && name == C.SO_LINGER) && !(level == C.SOL_RDMA && name == C.RDMA_ROUTE) {
		return C.int(syscall.EINVAL)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	open := r.c == nil && !r.dialing && r.pc == nil // buffers not allocated yet (a listener's: its next connections')
	if r.l != nil {
		defer func() { r.l.SetConfig(&r.cfg) }()
	}
	key := [2]int{int(level), int(name)}
	switch level {
	case C.SOL_SOCKET:
		switch name {
		case C.SO_REUSEADDR, C.SO_OOBINLINE:
			r.so[key] = val
		case C.SO_RCVBUF:
			if open {
				r.cfg.RecvBuf = val << 1
			}
		case C.SO_SNDBUF:
			if open {
				r.cfg.SendBuf = val << 1
			}
		case C.SO_LINGER:
			if v == nil || n < C.socklen_t(unsafe.Sizeof(C.struct_linger{})) {
				return C.int(syscall.EINVAL)
			}
			r.so[key] = int((*C.struct_linger)(v).l_onoff)
		case C.SO_KEEPALIVE:
			r.so[key] = val
			if r.keepIdle == 0 {
				r.keepIdle = 7200
				if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time"); err == nil {
					if k := atoiTrim(string(b)); k > 0 {
						r.keepIdle = k
					}
				}
			}
			r.applyKeepAlive()
		default:
			return C.int(syscall.ENOTSUP)
		}
	case C.IPPROTO_TCP:
		switch name {
		case C.TCP_KEEPCNT, C.TCP_KEEPINTVL, C.TCP_MAXSEG:
		case C.TCP_KEEPIDLE:
			if val <= 0 {
				return C.int(syscall.EINVAL)
			}
			r.keepIdle = val
			r.applyKeepAlive()
		case C.TCP_NODELAY:
			r.so[key] = val
		default:
			return C.int(syscall.ENOTSUP)
		}
	case C.IPPROTO_IPV6:
		if name != C.IPV6_V6ONLY {
			return C.int(syscall.ENOTSUP)
		}
		r.so[key] = val
	case C.SOL_RDMA:
		if !open {
			return C.int(syscall.EINVAL)
		}
		switch name {
		case C.RDMA_SQSIZE:
			r.cfg.SQSize = min(val, 0xFFFE)
		case C.RDMA_RQSIZE:
			r.cfg.RQSize = min(val, 0xFFFE)
		case C.RDMA_INLINE:
			r.cfg.Inline = min(val, 0xFFFE)
			if val == 0 {
				r.cfg.Inline = -1
			}
		case C.RDMA_IOMAPSIZE:
			r.cfg.IOMapSize = val
		case C.RDMA_ROUTE:
			// A path from rdma_getaddrinfo: the CM resolves its own route.
		default:
			return C.int(syscall.ENOTSUP)
		}
	default:
		return C.int(syscall.ENOTSUP)
	}
	return 0
}

// applyKeepAlive starts or stops the connection's keepalives (under r.mu).
func (r *rsock) applyKeepAlive() {
	if r.c == nil {
		return
	}
	if r.so[[2]int{C.SOL_SOCKET, C.SO_KEEPALIVE}] != 0 {
		r.c.SetKeepAlive(time.Duration(r.keepIdle) * time.Second)
	} else {
		r.c.SetKeepAlive(0)
	}
}

func atoiTrim(s string) int {
	n := 0
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

//export srgo_rs_getsockopt
func srgo_rs_getsockopt(fd C.int, level, name C.int, v unsafe.Pointer, n *C.socklen_t) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return C.int(syscall.EBADF)
	}
	if v == nil || n == nil {
		return C.int(syscall.EFAULT)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.cfg
	if r.c != nil {
		cfg = r.c.Config()
	}
	put := func(x int) C.int {
		if *n < 4 {
			return C.int(syscall.EINVAL)
		}
		*(*C.int)(v) = C.int(x)
		*n = 4
		return 0
	}
	key := [2]int{int(level), int(name)}
	b2i := func(x int) int {
		if x != 0 {
			return 1
		}
		return 0
	}
	switch level {
	case C.SOL_SOCKET:
		switch name {
		case C.SO_REUSEADDR, C.SO_KEEPALIVE, C.SO_OOBINLINE:
			return put(b2i(r.so[key]))
		case C.SO_RCVBUF:
			return put(orDef(cfg.RecvBuf, 1<<17))
		case C.SO_SNDBUF:
			return put(orDef(cfg.SendBuf, 1<<17))
		case C.SO_LINGER:
			if *n < C.socklen_t(unsafe.Sizeof(C.struct_linger{})) {
				return C.int(syscall.EINVAL)
			}
			lg := (*C.struct_linger)(v)
			lg.l_onoff = C.int(b2i(r.so[key]))
			lg.l_linger = 0
			*n = C.socklen_t(unsafe.Sizeof(C.struct_linger{}))
			return 0
		case C.SO_ERROR:
			e := r.soErr
			r.soErr = 0
			if e == 0 && r.c != nil {
				if err := r.c.Err(); err != nil {
					e = rsErrno(err)
				}
			}
			return put(int(e))
		}
	case C.IPPROTO_TCP:
		switch name {
		case C.TCP_KEEPCNT, C.TCP_KEEPINTVL:
			return put(1)
		case C.TCP_KEEPIDLE:
			return put(r.keepIdle)
		case C.TCP_NODELAY:
			return put(b2i(r.so[key]))
		case C.TCP_MAXSEG:
			return put(1024) // rxe's active MTU over a 1500-byte netdev
		}
	case C.IPPROTO_IPV6:
		if name == C.IPV6_V6ONLY {
			return put(b2i(r.so[key]))
		}
	case C.SOL_RDMA:
		switch name {
		case C.RDMA_SQSIZE:
			return put(orDef(cfg.SQSize, 384))
		case C.RDMA_RQSIZE:
			return put(orDef(cfg.RQSize, 384))
		case C.RDMA_INLINE:
			if cfg.Inline < 0 {
				return put(0)
			}
			return put(orDef(cfg.Inline, 64))
		case C.RDMA_IOMAPSIZE:
			return put(cfg.IOMapSize)
		}
	}
	return C.int(syscall.ENOTSUP)
}

func orDef(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

//export srgo_rs_fcntl
func srgo_rs_fcntl(fd C.int, cmd C.int, arg C.int) C.int {
	r, ok := rsLookup(fd)
	if !ok {
		return -C.int(syscall.EBADF)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch cmd {
	case C.F_GETFL:
		return C.int(r.flags)
	case C.F_SETFL:
		r.flags = int(arg)
		r.nonblock = arg&C.O_NONBLOCK != 0
		if r.c != nil {
			r.c.SetNonblock(r.nonblock)
		}
		if r.l != nil {
			r.l.SetNonblock(r.nonblock)
		}
		if r.pc != nil {
			r.pc.SetNonblock(r.nonblock)
		}
		return 0
	}
	return -C.int(syscall.ENOTSUP)
}

//export srgo_rs_iomap
func srgo_rs_iomap(fd C.int, buf unsafe.Pointer, n C.size_t, prot, flags C.int, offset C.off_t, errp *C.int) C.int64_t {
	r, ok := rsLookup(fd)
	if !ok {
		*errp = C.int(syscall.EBADF)
		return -1
	}
	c, e := r.conn()
	if c == nil || prot&^(C.PROT_WRITE|C.PROT_NONE) != 0 || buf == nil || n == 0 {
		if e == 0 {
			e = syscall.EINVAL
		}
		*errp = C.int(e)
		if c != nil {
			*errp = C.int(syscall.EINVAL)
		}
		return -1
	}
	off, err := c.IOMap(unsafe.Slice((*byte)(buf), int(n)), int64(offset))
	if err != nil {
		*errp = C.int(rsErrno(err))
		return -1
	}
	return C.int64_t(off)
}

//export srgo_rs_iounmap
func srgo_rs_iounmap(fd C.int, buf unsafe.Pointer, n C.size_t) C.int {
	_, c, e := rsConnected(fd)
	if c == nil {
		return C.int(e)
	}
	if buf == nil {
		return C.int(syscall.EINVAL)
	}
	return C.int(rsErrno(c.IOUnmap(unsafe.Slice((*byte)(buf), int(n)))))
}

//export srgo_rs_iowrite
func srgo_rs_iowrite(fd C.int, buf unsafe.Pointer, n C.size_t, offset C.off_t, flags C.int) C.ssize_t {
	_, c, e := rsConnected(fd)
	if c == nil {
		return -C.ssize_t(e)
	}
	if n == 0 {
		return 0
	}
	k, err := c.IOWrite(unsafe.Slice((*byte)(buf), int(n)), int64(offset), int(flags))
	if err != nil && k == 0 {
		return -C.ssize_t(rsErrno(err))
	}
	return C.ssize_t(k)
}

//export srgo_rs_is_dgram
func srgo_rs_is_dgram(fd C.int) C.int {
	if dgramSock(fd) != nil {
		return 1
	}
	return 0
}
