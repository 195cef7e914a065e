package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawSock is the endpoint's bound socket (Config.Netpoll off), which can
// leave the netpoller's sight while a caller polls it. A socket registered
// with the netpoller wakes a thread parked in the runtime's epoll_wait for
// every datagram that arrives, even one that Poll then takes on a polling
// caller's thread: with a program spinning on its completion queues (the C
// library's ibv_poll_cq) that was a thread wake-up per message, and a
// quarter to a half of the process's CPU time.
//
// Readers wait in the netpoller through an epoll instance of the socket's
// own (ep), which the netpoller watches and where the socket is registered
// edge-triggered: each datagram then wakes the netpoller as a directly
// registered socket would, with no system call added per wake-up.
// unregister takes the socket out of ep (ServeView does while it steps
// aside for a busy poller), and the next Read puts it back: one
// epoll_ctl(2) each, no allocation. An eventfd of its own (kfd) stays in
// ep: kick wakes a reader waiting in Read through it, so that a poller
// that takes every datagram before the waiting reader is woken can still
// tell it to step aside. Everything else uses the descriptor
// itself: Control, and Write (used only with Config.SendFromBound), which
// waits in poll(2). Other ways measured worse: waiting for reads in
// poll(2) kept a processor in a system call, which the runtime's monitor
// takes back after 20 µs and hands to another thread (a 1 MiB stream's CPU
// per MiB rose by 40 %); a one-shot registration re-armed before each wait
// cost 2 system calls per wake-up (7 %); a registered duplicate of the
// descriptor, closed and made again, allocated at each change.
//
// It is a syscall.RawConn. Close wakes a waiting reader or writer, waits
// until no call holds the descriptor, and closes it: the descriptor is
// never used after it is closed (nor a reused number).
type rawSock struct {
	fd    int
	state atomic.Int64  // bit 0: closed; the rest: calls in progress, 2 each
	idle  chan struct{} // the last call after Close signals here
	ep    int           // the private epoll instance
	epf   *os.File      // ep, registered with the netpoller
	eprc  syscall.RawConn
	// The readers' state: they are serialized (the endpoint's rx.mu).
	registered bool                  // the socket is in ep
	f          func(fd uintptr) bool // Read's caller's step
	readFn     func(fd uintptr) bool // readStep, bound once (no allocation per Read)
	kbuf       [8]byte               // readStep's drain of kfd
	// kfd is an eventfd in ep (edge-triggered), written by kick.
	kfd    int
	kicked atomic.Bool // kick wrote kfd: the reader's next step drains it
	one    [8]byte     // kick's write: the count 1
}

// rawWaitMs bounds one poll(2) wait of Write: it checks for Close at least
// this often even if no wake-up reached it.
const rawWaitMs = 1000

// newRawSock takes socket fd (non-blocking); on failure fd is closed.
func newRawSock(fd int) (*rawSock, error) {
	s := &rawSock{fd: fd, idle: make(chan struct{}, 1)}
	s.readFn = s.readStep
	binary.NativeEndian.PutUint64(s.one[:], 1)
	kfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	s.kfd = kfd
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(kfd)
		unix.Close(fd)
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(kfd)}
	if err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, kfd, &ev); err == nil {
		err = unix.SetNonblock(ep, true)
	}
	if err == nil {
		s.ep = ep
		s.epf = os.NewFile(uintptr(ep), "udp-epoll")
		s.eprc, err = s.epf.SyscallConn()
	}
	if err != nil {
		if s.epf != nil {
			s.epf.Close()
		} else {
			unix.Close(ep)
		}
		unix.Close(kfd)
		unix.Close(fd)
		return nil, os.NewSyscallError("epoll", err)
	}
	return s, nil
}

func (s *rawSock) acquire() bool {
	if s.state.Add(2)&1 != 0 {
		s.release()
		return false
	}
	return true
}

func (s *rawSock) release() {
	if s.state.Add(-2) == 1 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

func (s *rawSock) closing() bool { return s.state.Load()&1 != 0 }

// Control calls f with the descriptor, which stays open while f runs.
func (s *rawSock) Control(f func(fd uintptr)) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	s.release()
	return nil
}

// Read calls f until it returns true, waiting for the socket to become
// readable after each false: in the netpoller, through ep, where Read
// registers the socket if unregister took it out.
func (s *rawSock) Read(f func(fd uintptr) bool) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	if !s.registered {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(s.fd)}
		if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			return os.NewSyscallError("epoll_ctl", err)
		}
		s.registered = true
	}
	s.f = f
	err := s.eprc.Read(s.readFn)
	s.f = nil
	if err != nil && s.closing() {
		return net.ErrClosed
	}
	return err
}

// readStep is Read's callback on ep: the caller's step on the socket,
// after draining kfd if kick wrote it (an eventfd left readable would keep
// ep ready, and every datagram would wake the reader again).
func (s *rawSock) readStep(uintptr) bool {
	if s.kicked.Load() && s.kicked.Swap(false) {
		unix.Read(s.kfd, s.kbuf[:])
	}
	return s.f(uintptr(s.fd))
}

// kick wakes the reader waiting in Read (its step runs at once), or, if
// none waits, the next one to wait. Any goroutine may call it; it does
// not allocate.
func (s *rawSock) kick() {
	if !s.acquire() {
		return
	}
	unix.Write(s.kfd, s.one[:])
	s.kicked.Store(true)
	s.release()
}

// unregister takes the socket out of ep, and so out of the netpoller's
// sight, until the next Read. Only a reader calls it, outside Read.
func (s *rawSock) unregister() {
	if s.registered && s.acquire() {
		unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, s.fd, nil)
		s.registered = false
		s.release()
	}
}

// Write calls f until it returns true, waiting in poll(2) for room to send
// after each false.
func (s *rawSock) Write(f func(fd uintptr) bool) error { return s.loop(f, unix.POLLOUT) }

func (s *rawSock) loop(f func(fd uintptr) bool, ev int16) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	for !f(uintptr(s.fd)) {
		if err := s.wait(ev); err != nil {
			return err
		}
	}
	return nil
}

// wait blocks in poll(2) until the socket is ready for ev or closes.
func (s *rawSock) wait(ev int16) error {
	pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: ev}}
	for {
		if s.closing() {
			return net.ErrClosed
		}
		n, err := unix.Poll(pfd[:], rawWaitMs)
		switch {
		case err == unix.EINTR || (err == nil && n == 0):
			continue
		case err != nil:
			return os.NewSyscallError("poll", err)
		}
		if s.closing() {
			return net.ErrClosed
		}
		return nil
	}
}

// Close marks the socket closed, wakes its waiting calls, waits for every
// call in progress to return and closes the descriptor.
func (s *rawSock) Close() error {
	old := s.state.Or(1)
	if old&1 != 0 {
		return net.ErrClosed
	}
	// Closing ep ends a Read's wait (and waits until no call is inside
	// it).
	nerr := s.epf.Close()
	if old>>1 != 0 {
		// On a UDP socket shutdown(2) fails with ENOTCONN but still marks
		// it shut down and wakes its waiters: a Write's poll(2) returns
		// POLLHUP.
		unix.Shutdown(s.fd, unix.SHUT_RDWR)
		<-s.idle
	}
	kerr := os.NewSyscallError("close", unix.Close(s.kfd))
	return errors.Join(nerr, kerr, os.NewSyscallError("close", unix.Close(s.fd)))
}

// localPort returns the port the socket is bound to.
func (s *rawSock) localPort() (uint16, error) {
	var port uint16
	var err error
	cerr := s.Control(func(fd uintptr) {
		var sa unix.Sockaddr
		sa, err = unix.Getsockname(int(fd))
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			port = uint16(sa.Port)
		case *unix.SockaddrInet6:
			port = uint16(sa.Port)
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	return port, os.NewSyscallError("getsockname", err)
}
