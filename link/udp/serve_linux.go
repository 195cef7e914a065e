package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/sigwait"
	"github.com/softroce/softroce/link"
)

// ServeView receives datagrams until the endpoint closes, handing each batch
// to handle as ReadBatchView would return it: pkts[:n] point into the
// endpoint's receive buffers (or, without GRO, into pkts' own buffers) and
// are valid until handle returns. It is the endpoint's only reader while it
// runs, and returns an error wrapping net.ErrClosed once the endpoint closes,
// or the first read error. Close waits for a handle call in progress to
// return (handle runs inside the socket's read): handle must not wait for
// anything the goroutine calling Close holds.
//
// It differs from calling ReadBatchView in a loop in how it waits. Each
// ReadBatchView call starts a new wait on the socket, and the runtime
// forgets at its start that the socket became readable (RawConn.Read), so a
// loop must read once more after every batch, and that read usually finds
// nothing: a system call per wake-up. ServeView keeps one wait open across
// batches: readiness that arrives while handle runs is kept, and a read
// that came back short (the socket was drained) is followed by a wait, not
// by another read.
//
// Without Config.Netpoll, while a caller polls the socket beside it (Poll,
// at least pollBusy calls per pollAside), ServeView steps aside: it takes
// the socket out of the netpoller and sleeps in steps of pollAside until
// the poller goes quiet, so that datagrams the poller handles itself wake
// no thread of the runtime (stepAside); then it reads and waits again.
// A poller that becomes busy while ServeView waits wakes it (kickParked):
// it takes every datagram before ServeView is woken for it, so ServeView
// would otherwise wait, its socket in the netpoller, as long as it polls.
//
// busyPoll > 0 keeps reading without waiting for that long after each
// batch (yielding the processor between reads), as Config.BusyPoll of the
// engine: a reply then needs no thread wake-up.
func (e *Endpoint) ServeView(pkts []link.Packet, busyPoll time.Duration, handle func(pkts []link.Packet)) error {
	return e.ServeSteps(pkts, busyPoll, handle, nil)
}

// ServeSteps is ServeView with after, when not nil, called after each step
// (a read and the handling of what it got), once the step's hold on the
// endpoint is released: a handler that gives its processor away
// (runtime.Gosched, so that a goroutine its batch woke runs first) does it
// there. Yielding inside handle would leave the other readers (Poll,
// WaitReadable) waiting for the goroutine to run again; when they are a C
// program's threads, which keep the runtime's processors while they run,
// that took milliseconds.
func (e *Endpoint) ServeSteps(pkts []link.Packet, busyPoll time.Duration, handle func(pkts []link.Packet), after func()) error {
	if after == nil {
		after = func() {}
	}
	if e.closed.Load() {
		return errClosed
	}
	n := min(len(pkts), e.batch)
	if n == 0 {
		return errors.New("udp: ServeView: pkts is empty: pass at least one packet (BatchSize() of them to receive full batches)")
	}
	pkts = pkts[:n]
	if !e.gro {
		for i := range pkts {
			if cap(pkts[i].Buf) == 0 {
				return fmt.Errorf("udp: ServeView: packet %d has a buffer of capacity 0: give each packet a buffer of at least MTU bytes", i)
			}
		}
	}
	rx := &e.rx
	rx.mu.Lock()
	defer rx.mu.Unlock()
	var (
		ferr error
		last time.Time // when the last batch ended (busy polling)
		seen = e.polls.Load()
	)
	aside := e.sock != nil && busyPoll == 0
	if aside {
		defer e.parked.Store(0)
	}
	goAside := false
	slept := false // counted a sleeper of the lanes (sleepLocal) and waited
	// park is called before each wait: the Poll calls counted from here
	// on are those made while ServeView waits (not those made during its
	// step, which may have been long before it reads: a poller that
	// stopped since is not busy), and they wake it (kickParked).
	park := func() {
		if aside {
			seen = e.polls.Load()
			e.parkedAt.Store(mono())
			e.parked.Store(seen + 1)
		}
	}
	fn := func(fd uintptr) bool {
		if aside {
			e.parked.Store(0)
		}
		if slept {
			slept = false
			e.wakeLocal()
		}
		for {
			if e.closed.Load() {
				ferr = errClosed
				return true
			}
			if aside {
				p := e.polls.Load()
				busy := p-seen >= pollBusy || e.waited()
				seen = p
				if busy {
					goAside = true
					return true
				}
			}
			// A read and the handling of what it got are one step under
			// rd, so that a Poll beside this loop cannot handle later
			// datagrams before earlier ones.
			e.rd.Lock()
			nl, turn, viewed := e.viewLanes(pkts, handle)
			if !turn {
				e.rd.Unlock()
				after()
				if busyPoll > 0 {
					last = time.Now()
				}
				continue // the lanes keep it busy; the socket's turn comes
			}
			want := e.armRecv(&rx.rxQueue, pkts)
			k, errno, drained := e.recvm(fd, rx.hdrs[:want], viewed)
			switch errno {
			case 0:
			case unix.EINTR:
				e.rd.Unlock()
				after()
				continue
			case unix.EAGAIN:
				e.rd.Unlock()
				after()
				if nl > 0 {
					if busyPoll > 0 {
						last = time.Now()
					}
					continue // the lanes had records: read again
				}
				e.ctr.emptyReads.Add(1)
				if busyPoll > 0 && time.Since(last) < busyPoll {
					runtime.Gosched() // what the last batch woke runs between reads
					continue
				}
				if !e.sleepLocal() {
					continue // the lanes hold records
				}
				slept = true
				e.ctr.waits.Add(1)
				park()
				return false // wait for the socket
			default:
				e.rd.Unlock()
				after()
				e.ctr.readErrors.Add(1)
				ferr = os.NewSyscallError("recvmmsg", errno)
				return true
			}
			e.handleRead(&rx.rxQueue, pkts, want, k, handle)
			e.rd.Unlock()
			after()
			if busyPoll > 0 {
				last = time.Now()
			} else if k < want && drained && e.sleepLocal() {
				slept = true
				e.ctr.waits.Add(1)
				park()
				return false // the socket was drained: wait instead of reading again
			}
		}
	}
	for {
		if err := e.rc.Read(fn); err != nil {
			if e.closed.Load() || errors.Is(err, net.ErrClosed) {
				return errClosed
			}
			e.ctr.readErrors.Add(1)
			return fmt.Errorf("udp: read: %w", err)
		}
		if !goAside {
			return ferr
		}
		goAside = false
		e.sock.unregister()
		e.stepAside(&seen)
		// Read once more (registering the socket again): the poller may
		// have left datagrams.
	}
}

// WaitReadable waits on the calling thread, in poll(2), until the socket
// holds a datagram or fd (another descriptor, such as an eventfd; -1 for
// none) is readable, at most timeout; it reports which are. It reads
// nothing: the caller then takes the datagrams with Poll. ServeView steps
// aside while a thread waits here (as for a busy Poll caller), so that a
// datagram wakes the waiting thread alone, not a thread of the runtime
// too: a program thread blocked for a reply (the C library's blocking
// rsocket calls) is woken once, as a kernel socket's reader is. One thread
// at a time watches the socket: while one does, another that gives an fd
// waits on its fd alone (sock is then false), and is woken through it by
// what the watching thread handles (rping's CM thread and its CQ thread:
// one wake-up per datagram, not two). A signal that reaches the thread
// ends the wait with an error wrapping EINTR. Close waits for a
// WaitReadable in progress to return (within timeout).
func (e *Endpoint) WaitReadable(fd int, timeout time.Duration) (sock, other bool, err error) {
	if e.closed.Load() {
		return false, false, errClosed
	}
	watch := true
	if fd < 0 {
		e.waiters.Add(1)
	} else {
		watch = e.waiters.CompareAndSwap(0, 1)
	}
	if watch {
		defer func() {
			e.waitEnd.Store(mono())
			if e.waiters.Add(-1) == 0 {
				e.signalWaitGone()
			}
		}()
	}
	ms := int(min(max(timeout, 0)/time.Millisecond, 1<<30))
	if watch {
		// Another reader's step (ServeView's or a Poll's, under rd) takes
		// what the link holds now: wait for it to end before looking.
		// Returned at once instead, this would have a caller that
		// alternates Poll (which gives way to that step) and WaitReadable
		// spin on the processor that reader waits for: a C program's CM
		// thread held the device's receive goroutine, stopped mid-step,
		// off for milliseconds so, a thousand turns at a time.
		e.rd.Lock()
		asleep := e.sleepLocal()
		e.rd.Unlock()
		if !asleep {
			return true, false, nil // the lanes hold records: Poll takes them
		}
		defer e.wakeLocal()
	}
	var perr error
	cerr := e.rc.Control(func(s uintptr) {
		fds := [2]unix.PollFd{{Fd: int32(s), Events: unix.POLLIN}, {Fd: int32(fd), Events: unix.POLLIN}}
		w := fds[:]
		switch {
		case fd < 0:
			w = fds[:1]
		case !watch:
			w = fds[1:]
		}
		// EINTR is returned, not retried: the waiting thread is a
		// program's, whose signal handler should end its blocking call.
		// But not the runtime's own signals (pollMask).
		_, perr = pollMasked(w, ms)
		sock = watch && fds[0].Revents != 0
		other = fd >= 0 && fds[1].Revents != 0
	})
	if cerr != nil {
		return false, false, errClosed
	}
	if perr != nil {
		return false, false, os.NewSyscallError("poll", perr)
	}
	return sock, other, nil
}

// pollQueue returns Poll's receive state, allocating it on first use
// (e.rd held).
func (e *Endpoint) pollQueue() *pollQueue {
	if q := e.prx; q != nil {
		return q
	}
	q := &pollQueue{}
	q.allocGRO(e.batch, e.gro, pollGROMsgs)
	q.fn = func(fd uintptr) {
		for {
			q.got, q.errno, _ = e.recvm(fd, q.hdrs[:q.want], q.sockOnly)
			if q.errno != unix.EINTR {
				return
			}
		}
	}
	e.prx = q
	return q
}

// PreparePoll allocates what Poll's first call would (its receive arrays
// and GRO buffers), so that a program that will poll pays for them when it
// sets up (the C library, when it opens a device) and not in its first
// poll: on a machine where a first touch of memory is dear (a guest whose
// page tables the hypervisor shadows), 1 MiB cleared there took a stock
// cmtime client's event thread milliseconds inside its timed steps.
func (e *Endpoint) PreparePoll() {
	if e.closed.Load() {
		return
	}
	e.rd.Lock()
	e.pollQueue()
	e.rd.Unlock()
}

// kickParked is Poll's, the pollBusy-th call since ServeView began to wait
// (parked, which is 1 + the count of Poll calls then, is w; p is this
// call's count): if those calls came within pollAside, the poller is busy
// and ServeView is woken (rawSock.kick) to step aside; slower calls start
// the count again from here.
func (e *Endpoint) kickParked(w, p uint64) {
	now := mono()
	if now-e.parkedAt.Load() > int64(pollAside) {
		if e.parked.CompareAndSwap(w, p+1) {
			e.parkedAt.Store(now)
		}
		return
	}
	if e.parked.CompareAndSwap(w, 0) {
		e.sock.kick()
	}
}

// signalWaitGone wakes a ServeView sleeping aside while threads waited
// (stepAside); a signal nobody takes yet is kept, once.
func (e *Endpoint) signalWaitGone() {
	if e.waitGone == nil {
		return
	}
	select {
	case e.waitGone <- struct{}{}:
	default:
	}
}

// waited reports a thread waiting in WaitReadable, or one that returned
// from it less than pollAside ago: the datagram that woke it is left for
// its Poll, which follows.
func (e *Endpoint) waited() bool {
	if e.waiters.Load() > 0 {
		return true
	}
	w := e.waitEnd.Load()
	return w != 0 && mono()-w < int64(pollAside)
}

// monoStart anchors mono.
var monoStart = time.Now()

// mono returns monotonic nanoseconds (since monoStart).
func mono() int64 { return int64(time.Since(monoStart)) }

const (
	// pollAside is the step ServeView sleeps in while a poller is busy
	// (stepAside): what the poller leaves waits at most about this long
	// after it goes quiet, and the sleeping thread costs a wake-up per
	// step instead of one per datagram.
	pollAside = 500 * time.Microsecond
	// pollBusy is how many Poll calls per pollAside make a poller busy: a
	// thread spinning on its completion queues makes hundreds.
	pollBusy = 8
)

// stepAside is ServeView's while a poller is busy beside it (at least
// pollBusy Poll calls since *seen, or a thread waiting in WaitReadable or
// back from it within pollAside), its socket out of the netpoller: it
// sleeps pollAside, again while the poller stays busy, until the poller goes
// quiet or the endpoint closes; while a thread has waited in WaitReadable
// for a whole step, it sleeps until that thread leaves. The sleep is the runtime's (time.Sleep),
// which leaves the goroutine's processor idle: a nanosleep(2) on the thread
// kept it in a system call, which the runtime's monitor (sysmon) took back
// every 20 µs and handed to another thread, several times the context
// switches.
func (e *Endpoint) stepAside(seen *uint64) {
	for !e.closed.Load() {
		e.ctr.asides.Add(1)
		if e.waiters.Load() > 0 && e.waitGone != nil && mono()-e.waitEnd.Load() >= int64(pollAside) {
			// A thread waits on the socket (WaitReadable) and takes what
			// arrives, and none returned from it within the last step:
			// sleep until it leaves, not a step at a time (a program's
			// thread may wait for CM events all its life). While threads
			// come and go (a blocking ping-pong leaves every message), the
			// steps below go on instead: waking here at every leave cost
			// the program a thread wake-up per message (stock rstream -T b,
			// 64 bytes: 37-40 µs against 33-35 µs a transfer).
			<-e.waitGone
			continue
		}
		time.Sleep(pollAside)
		p := e.polls.Load()
		busy := p-*seen >= pollBusy || e.waited()
		*seen = p
		if !busy {
			return
		}
	}
}

// handleRead decodes the k messages a recvmmsg of want messages got into
// q and hands them to handle in batches of at most len(pkts); it returns
// how many datagrams it handed over.
func (e *Endpoint) handleRead(q *rxQueue, pkts []link.Packet, want, k int, handle func(pkts []link.Packet)) int {
	e.decodeAll(q, k)
	if e.gro {
		q.pendMsg, q.pendOff, q.pendCount = 0, 0, k
		total := 0
		for q.pendMsg < q.pendCount {
			m := e.handOutGRO(q, pkts, true)
			if m > 0 {
				handle(pkts[:m])
			}
			total += m
		}
		return total
	}
	clearIovs(q.iovs[:want])
	e.fillPlain(q, pkts, k)
	handle(pkts[:k])
	return k
}

// pollQueue is Poll's own receive state: it reads beside ServeView, which
// owns rx.
type pollQueue struct {
	rxQueue
	fn       func(fd uintptr) // the recvmmsg, for RawConn.Control
	sockOnly bool             // fn skips the lanes (viewLanes read them)
	want     int
	got      int
	errno    unix.Errno
}

// Poll receives the datagrams waiting on the socket now, without waiting,
// and hands them to handle on the calling goroutine, as ServeView does (the
// same views, valid until handle returns); it returns how many it handled.
// It is a second reader beside ServeView, with receive arrays of its own,
// for a caller that busy-polls on its own thread (the C library's
// ibv_poll_cq): what arrives then needs no wake-up of ServeView's
// goroutine. A read and the handling of what it got are serialized with
// ServeView's, so handle sees datagrams in the order the socket gave them;
// when another read is in progress Poll returns 0 at once (that reader
// hands over what is waiting). One recvmmsg per call; no allocation after
// the first call.
func (e *Endpoint) Poll(pkts []link.Packet, handle func(pkts []link.Packet)) (int, error) {
	if e.closed.Load() {
		return 0, errClosed
	}
	n := min(len(pkts), e.batch)
	if n == 0 {
		return 0, nil
	}
	if !e.gro {
		for i := range pkts[:n] {
			if cap(pkts[i].Buf) == 0 {
				return 0, fmt.Errorf("udp: Poll: packet %d has a buffer of capacity 0: give each packet a buffer of at least MTU bytes", i)
			}
		}
	}
	p := e.polls.Add(1)
	if w := e.parked.Load(); w != 0 && p+1-w >= pollBusy {
		e.kickParked(w, p)
	}
	if !e.rd.TryLock() {
		return 0, nil
	}
	defer e.rd.Unlock()
	nl, turn, viewed := e.viewLanes(pkts[:n], handle)
	if !turn {
		return nl, nil
	}
	q := e.pollQueue()
	q.want = e.armRecv(&q.rxQueue, pkts[:n])
	q.sockOnly = viewed
	if err := e.rc.Control(q.fn); err != nil {
		clearIovs(q.iovs[:q.want])
		return nl, errClosed
	}
	switch q.errno {
	case 0:
	case unix.EAGAIN:
		clearIovs(q.iovs[:q.want])
		if nl == 0 {
			e.ctr.emptyReads.Add(1)
		}
		return nl, nil
	default:
		clearIovs(q.iovs[:q.want])
		e.ctr.readErrors.Add(1)
		return nl, os.NewSyscallError("recvmmsg", q.errno)
	}
	return nl + e.handleRead(&q.rxQueue, pkts[:n], q.want, q.got, handle), nil
}

// viewLanes is the view readers' turn of the lanes (viewLocal, with GRO
// buffers): how many records it handed to handle, whether the socket is
// due a read, and whether the lanes were read here (the socket read that
// follows then skips them).
func (e *Endpoint) viewLanes(pkts []link.Packet, handle func(pkts []link.Packet)) (n int, turn, viewed bool) {
	if e.inbox == nil || !e.gro {
		return 0, true, false
	}
	n, turn = e.viewLocal(pkts, handle)
	return n, turn, true
}

// armRecv points q's receive iovecs at its GRO buffers (or, without GRO, at
// pkts' buffers), resets the message headers and returns how many messages
// to ask for. Every recvmmsg of the endpoint is armed here.
func (e *Endpoint) armRecv(rx *rxQueue, pkts []link.Packet) int {
	n := len(pkts)
	if e.gro {
		n = len(rx.groBuf) / groBufSize
		for i := 0; i < n; i++ {
			rx.iovs[i].Base = &rx.groBuf[i*groBufSize]
			rx.iovs[i].SetLen(groBufSize)
		}
	} else {
		for i := 0; i < n; i++ {
			b := pkts[i].Buf[:cap(pkts[i].Buf)]
			rx.iovs[i].Base = &b[0]
			rx.iovs[i].SetLen(len(b))
		}
	}
	for i := 0; i < n; i++ {
		h := &rx.hdrs[i].hdr
		h.Namelen = sizeofSockaddr
		h.SetControllen(oobLen)
		h.Flags = 0
	}
	return n
}

// pollMasked is poll(2) that the Go runtime's own signals cannot end:
// SIGURG (preemption, which the runtime may send to a thread it saw
// running Go just before the thread went into this wait) and SIGPROF stay
// blocked for the wait (ppoll) and are taken after it, so that EINTR means
// a signal of the program's. A thread whose signals the C library holds
// for a blocking call waits with its mask from before (sigwait.Held).
func pollMasked(fds []unix.PollFd, ms int) (int, error) {
	var m unix.Sigset_t
	if h := sigwait.Held; h == nil || !h(&m) {
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, nil, &m); err != nil {
			return unix.Poll(fds, ms)
		}
	}
	for _, sig := range [...]unix.Signal{unix.SIGURG, unix.SIGPROF} {
		m.Val[(sig-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	}
	var ts *unix.Timespec
	if ms >= 0 {
		t := unix.NsecToTimespec(int64(ms) * int64(time.Millisecond))
		ts = &t
	}
	// Not unix.Ppoll: it passes the mask's size as 0, which the kernel
	// refuses (EINVAL) for a non-nil mask; the kernel's sigset is 8 bytes.
	// A wait that may block gives the processor away (ppollBlocking).
	var r uintptr
	var e syscall.Errno
	if ms == 0 {
		r, _, e = unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
			uintptr(unsafe.Pointer(ts)), uintptr(unsafe.Pointer(&m)), 8, 0)
	} else {
		r, e = ppollBlocking(uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(ts)), uintptr(unsafe.Pointer(&m)))
		// What the uintptrs point at lives until the call returned.
		runtime.KeepAlive(fds)
		runtime.KeepAlive(ts)
		runtime.KeepAlive(&m)
	}
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}
