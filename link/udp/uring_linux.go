package udp

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// osConfig holds the Linux-only Config settings.
type osConfig struct {
	// uring selects io_uring instead of recvmmsg/sendmmsg (benchmarks and
	// tests: measured slower, so not offered; see the package
	// documentation).
	uring uringMode
}

// uringMode selects how an endpoint moves datagrams.
type uringMode uint8

const (
	uringOff uringMode = iota // recvmmsg / sendmmsg
	uringOn                   // io_uring RECVMSG / SENDMSG
	uringZC                   // io_uring RECVMSG / SENDMSG_ZC (zero-copy send)
)

// User-data tags of the requests that are not messages.
const (
	tagWake   = ^uint64(0)
	tagCancel = ^uint64(1)
)

// liveURings keeps the memory that the kernel may write (receive buffers,
// message headers) reachable while requests are in flight, even if an
// endpoint is dropped without Close.
var liveURings sync.Map // *uringIO -> *Endpoint

// uringIO moves an endpoint's messages through two io_uring instances, one
// for each direction, so that ReadBatch and WriteBatch stay independent.
// The messages are the same msghdrs the recvmmsg/sendmmsg path builds and
// parses (build, putControl, decodeMsg): only the system calls differ.
//
// Receives are kept posted, one per GRO buffer of the endpoint, and handed
// out in completion order (the order the socket delivered them); a buffer is
// posted again on the ReadBatch after the one that returned it, the same
// lifetime ReadBatchView promises. Sends of one WriteBatch are linked
// (IOSQE_IO_LINK), so they leave in order and stop at the first failure, as
// sendmmsg does, and WriteBatch waits for all their completions (and, for
// zero-copy sends, for the notifications that the kernel is done with the
// caller's buffers) before it returns.
type uringIO struct {
	rx, tx *ring // nil once closed
	sock   int32 // the UDP socket
	wake   int   // eventfd that Close writes to wake a blocked reader
	zc     bool

	// Receive side, under Endpoint.rx.mu.
	nbuf   int   // receive buffers
	repost []int // buffers to post again (all of them at first)
	woken  bool

	// Send side, under Endpoint.tx.mu.
	res      []int32 // result per message of the current send
	notifs   int     // zero-copy notifications still to come
	txErr    error   // the send ring failed: requests may be in flight
	zcCopied atomic.Uint64
}

// newURingIO sets up io_uring for e (whose batches are allocated, with GRO
// buffers) or says why it cannot.
func newURingIO(e *Endpoint, mode uringMode) (_ *uringIO, err error) {
	u := &uringIO{zc: mode == uringZC, wake: -1, nbuf: min(groMsgs, e.batch)}
	defer func() {
		if err != nil {
			u.release()
		}
	}()
	ops := []uint8{iouOpSendmsg, iouOpRecvmsg, iouOpPollAdd, iouOpAsyncCancel}
	if u.rx, err = newRing(pow2(uint32(u.nbuf)+1), &e.ctr.syscalls, ops...); err != nil {
		return nil, err
	}
	if u.zc {
		ops = append(ops, iouOpSendmsgZC)
	}
	if u.tx, err = newRing(pow2(uint32(e.batch)), &e.ctr.syscalls, ops...); err != nil {
		return nil, err
	}
	if u.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	var cerr error
	if err := e.rc.Control(func(fd uintptr) {
		u.sock = int32(fd)
		// Some kernels complete a request on an O_NONBLOCK file with
		// EAGAIN instead of waiting for it; the socket is only used
		// through the rings from now on.
		cerr = unix.SetNonblock(int(fd), false)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	s, err := u.rx.push()
	if err != nil {
		return nil, err
	}
	*s = iouSQE{opcode: iouOpPollAdd, fd: int32(u.wake), opFlags: unix.POLLIN, userData: tagWake}
	if err := u.rx.enter(0); err != nil {
		return nil, err
	}
	u.repost = make([]int, u.nbuf, 2*u.nbuf)
	for i := range u.repost {
		u.repost[i] = i
	}
	u.res = make([]int32, e.batch)
	if u.zc {
		// A zero-copy send attaches the pages of its buffers to one
		// packet, which holds at most MAX_SKB_FRAGS (17 by default)
		// fragments; a larger GSO send fails with EMSGSIZE.
		e.tx.frags = zcMaxFrags
	}
	liveURings.Store(u, e)
	return u, nil
}

// zcMaxFrags is the kernel's default MAX_SKB_FRAGS (linux/skbuff.h).
const zcMaxFrags = 17

var pageSize = os.Getpagesize()

// spanPages returns how many memory pages b (not empty) touches.
func spanPages(b []byte) int {
	off := int(uintptr(unsafe.Pointer(&b[0])) & uintptr(pageSize-1))
	return (off + len(b) + pageSize - 1) / pageSize
}

func pow2(n uint32) uint32 {
	p := uint32(1)
	for p < n {
		p <<= 1
	}
	return p
}

// recv posts the receive buffers handed out last time, waits for at least
// one datagram and decodes the received messages into rx.meta, listing
// their buffers in rx.order in the order they arrived.
func (u *uringIO) recv(e *Endpoint) (int, error) {
	rx := &e.rx
	if u.rx == nil || u.woken {
		return 0, errClosed
	}
	for _, i := range u.repost {
		h := &rx.hdrs[i].hdr
		h.Namelen = sizeofSockaddr
		h.SetControllen(oobLen)
		h.Flags = 0
		rx.iovs[i].Base = &rx.groBuf[i*groBufSize]
		rx.iovs[i].SetLen(groBufSize)
		s, err := u.rx.push()
		if err != nil {
			return 0, err
		}
		*s = iouSQE{opcode: iouOpRecvmsg, fd: u.sock, addr: uint64(uintptr(unsafe.Pointer(h))), len: 1, userData: uint64(i)}
	}
	u.repost = u.repost[:0]
	k := 0
	var errno unix.Errno
	for {
		u.rx.reap(func(ud uint64, res int32, _ uint32) {
			switch {
			case ud == tagWake:
				u.woken = true
			case ud == tagCancel:
			case res < 0:
				u.repost = append(u.repost, int(ud))
				if errno == 0 && res != -int32(unix.ECANCELED) {
					errno = unix.Errno(-res)
				}
			default:
				i := int(ud)
				rx.hdrs[i].n = uint32(res)
				e.decodeMsg(i)
				rx.order[k] = i
				k++
				u.repost = append(u.repost, i)
			}
		})
		if k > 0 {
			e.ctr.readCalls.Add(1)
			return k, nil
		}
		if u.woken || e.closed.Load() {
			return 0, errClosed
		}
		if errno != 0 {
			e.ctr.readErrors.Add(1)
			return 0, os.NewSyscallError("recvmsg", errno)
		}
		if err := u.rx.enter(1); err != nil {
			e.ctr.readErrors.Add(1)
			return 0, fmt.Errorf("udp: read: %w", err)
		}
	}
}

// send transmits the nm messages prepared in e.tx and returns how many
// went out before the first failure.
func (u *uringIO) send(e *Endpoint, nm int) (int, error) {
	if u.tx == nil {
		return 0, errClosed
	}
	if u.txErr != nil {
		return 0, u.txErr
	}
	tx := &e.tx
	op, prio := uint8(iouOpSendmsg), uint16(0)
	if u.zc {
		op, prio = iouOpSendmsgZC, iouSendZCReportUsage
	}
	for i := 0; i < nm; i++ {
		s, err := u.tx.push()
		if err != nil {
			return 0, err
		}
		*s = iouSQE{opcode: op, ioprio: prio, fd: u.sock, addr: uint64(uintptr(unsafe.Pointer(&tx.hdrs[i].hdr))), len: 1, userData: uint64(i)}
		if i < nm-1 {
			s.flags = iosqeIOLink
		}
		u.res[i] = 0
	}
	for {
		u.tx.reap(func(ud uint64, res int32, fl uint32) {
			if fl&iouCQEFNotif != 0 {
				u.notifs--
				if uint32(res)&iouNotifUsageZCCopied != 0 {
					u.zcCopied.Add(1)
				}
				return
			}
			if ud < uint64(nm) {
				u.res[ud] = res
			}
			// A zero-copy send that got as far as the socket, or was
			// cancelled after it was prepared, is followed by a
			// notification once the kernel no longer reads its buffer.
			if fl&iouCQEFMore != 0 || (u.zc && res == -int32(unix.ECANCELED)) {
				u.notifs++
			}
		})
		if u.tx.pending <= 0 && u.notifs <= 0 {
			break
		}
		if err := u.tx.enter(uint32(u.tx.pending + max(u.notifs, 0))); err != nil {
			// Requests may still be in flight, reading the callers'
			// buffers and the endpoint's headers (kept reachable by
			// liveURings): this ring is done for.
			u.txErr = fmt.Errorf("udp: io_uring send: %w", err)
			return 0, u.txErr
		}
	}
	e.ctr.writeCalls.Add(1)
	for i := 0; i < nm; i++ {
		if r := u.res[i]; r < 0 {
			return i, os.NewSyscallError("sendmsg", unix.Errno(-r))
		}
	}
	return nm, nil
}

// close wakes a blocked reader, waits for it, cancels the posted receives
// and releases the rings. Called once, by Endpoint.Close.
func (u *uringIO) close(e *Endpoint) error {
	var one [8]byte
	*(*uint64)(unsafe.Pointer(&one[0])) = 1
	unix.Write(u.wake, one[:])
	var errs []error
	e.rx.mu.Lock()
	if u.rx != nil {
		for i := 0; i < u.nbuf; i++ {
			s, err := u.rx.push()
			if err != nil {
				errs = append(errs, err)
				break
			}
			*s = iouSQE{opcode: iouOpAsyncCancel, addr: uint64(i), userData: tagCancel}
		}
		if err := u.rx.drain(); err != nil {
			// Receives may still write into the endpoint's buffers:
			// keep them reachable for good.
			errs = append(errs, err)
			e.rx.mu.Unlock()
			return errors.Join(errs...)
		}
	}
	e.rx.mu.Unlock()
	e.tx.mu.Lock()
	u.release()
	e.tx.mu.Unlock()
	liveURings.Delete(u)
	return errors.Join(errs...)
}

// release closes the rings and the eventfd.
func (u *uringIO) release() {
	for _, r := range []**ring{&u.rx, &u.tx} {
		if *r != nil {
			(*r).close()
			*r = nil
		}
	}
	if u.wake >= 0 {
		unix.Close(u.wake)
		u.wake = -1
	}
}
