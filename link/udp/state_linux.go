package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
)

var _ link.StateWatcher = (*Endpoint)(nil)

// stateWatch follows the bound interface's state (link.StateWatcher) through
// an rtnetlink socket subscribed to link changes. The socket is opened with
// the endpoint, in the network namespace the endpoint is bound in, so that a
// watch started later from another namespace still sees the right interface.
type stateWatch struct {
	mu      sync.Mutex
	f       *os.File // the rtnetlink socket; nil: nothing to watch
	ifindex int32
	ifname  string        // the interface's name, for LinkSpeed's ethtool request
	done    chan struct{} // closed when the watching goroutine ends
	last    int           // the state last reported: 1 up, 0 down, -1 none
}

// openStateSocket finds the interface holding a (its name kept for
// LinkSpeed) and opens the rtnetlink socket for it. Wildcard and loopback addresses, group endpoints, and an
// address no interface holds get none (WatchState: link.ErrNoState).
func (e *Endpoint) openStateSocket(a netip.Addr) {
	if e.group || a.IsUnspecified() || a.IsLoopback() {
		return
	}
	idx := e.scope
	if idx == 0 {
		idx = ifaceIndexOf(a)
	}
	if idx == 0 {
		return
	}
	if ifc, err := net.InterfaceByIndex(int(idx)); err == nil {
		e.state.ifname = ifc.Name // for LinkSpeed
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return
	}
	e.state.f = os.NewFile(uintptr(fd), "rtnetlink")
	e.state.ifindex, e.state.last = int32(idx), -1
}

// WatchState implements link.StateWatcher: up is the interface being
// administratively up and running (IFF_UP and IFF_RUNNING: the kernel's
// operational state, carrier included). A removed interface is down. It may
// be called once per endpoint.
func (e *Endpoint) WatchState(f func(up bool)) error {
	s := &e.state
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e.closed.Load():
		return net.ErrClosed
	case s.f == nil:
		return link.ErrNoState
	case s.done != nil:
		return errors.New("udp: WatchState was already called on this endpoint")
	}
	if err := s.request(); err != nil {
		return err
	}
	buf := make([]byte, 32<<10) // first's, then watch's
	s.first(f, buf)
	s.done = make(chan struct{})
	go s.watch(f, buf)
	return nil
}

// first waits up to a second for the answer to request and reports it, so
// that the state is known when WatchState returns (a device opened on a
// down interface is down at once). Without an answer by then, the watch
// reports it when it comes.
func (s *stateWatch) first(f func(up bool), buf []byte) {
	if s.f.SetReadDeadline(time.Now().Add(time.Second)) != nil {
		return
	}
	defer s.f.SetReadDeadline(time.Time{})
	for {
		n, err := s.f.Read(buf)
		if err != nil {
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if up, ok := s.linkUp(m); ok {
				s.last = boolInt(up)
				f(up)
				return
			}
		}
	}
}

// request asks the kernel for the interface's current state; the answer
// arrives on the socket as a change would.
func (s *stateWatch) request() error {
	var req [unix.SizeofNlMsghdr + unix.SizeofIfInfomsg]byte
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.RTM_GETLINK)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	req[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(req[unix.SizeofNlMsghdr+4:], uint32(s.ifindex))
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Sendto(int(fd), req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}); err != nil {
		return err
	}
	return os.NewSyscallError("sendto rtnetlink", serr)
}

// watch reads link messages until the socket closes and calls f when the
// interface's state changes (the first answer always).
func (s *stateWatch) watch(f func(up bool), buf []byte) {
	defer close(s.done)
	for {
		n, err := s.f.Read(buf)
		if errors.Is(err, unix.ENOBUFS) {
			// Messages were lost (a burst of changes on the host): ask
			// again rather than trust the last one seen.
			s.mu.Lock()
			s.request()
			s.mu.Unlock()
			continue
		}
		if err != nil {
			return // closed
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			up, ok := s.linkUp(m)
			if !ok {
				continue
			}
			if u := boolInt(up); u != s.last {
				s.last = u
				f(up)
			}
		}
	}
}

// linkUp reads an RTM_NEWLINK or RTM_DELLINK message about the watched
// interface; ok is false for any other message.
func (s *stateWatch) linkUp(m syscall.NetlinkMessage) (up, ok bool) {
	t := m.Header.Type
	if (t != unix.RTM_NEWLINK && t != unix.RTM_DELLINK) || len(m.Data) < unix.SizeofIfInfomsg {
		return false, false
	}
	if int32(binary.NativeEndian.Uint32(m.Data[4:])) != s.ifindex {
		return false, false
	}
	fl := binary.NativeEndian.Uint32(m.Data[8:])
	return t == unix.RTM_NEWLINK && fl&unix.IFF_UP != 0 && fl&unix.IFF_RUNNING != 0, true
}

// close closes the socket and waits for the watching goroutine, if any.
func (s *stateWatch) close() error {
	s.mu.Lock()
	f, done := s.f, s.done
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	err := f.Close()
	if done != nil {
		<-done
	}
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
