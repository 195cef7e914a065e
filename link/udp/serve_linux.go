package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

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
// busyPoll > 0 keeps reading without waiting for that long after each
// batch (yielding the processor between reads), as Config.BusyPoll of the
// engine: a reply then needs no thread wake-up.
func (e *Endpoint) ServeView(pkts []link.Packet, busyPoll time.Duration, handle func(pkts []link.Packet)) error {
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
	)
	fn := func(fd uintptr) bool {
		for {
			if e.closed.Load() {
				ferr = errClosed
				return true
			}
			want := e.armRecv(pkts)
			k, errno := recvmmsg(fd, rx.hdrs[:want])
			e.ctr.syscalls.Add(1)
			switch errno {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				e.ctr.emptyReads.Add(1)
				if busyPoll > 0 && time.Since(last) < busyPoll {
					runtime.Gosched() // what the last batch woke runs between reads
					continue
				}
				e.ctr.waits.Add(1)
				return false // wait for the socket
			default:
				e.ctr.readErrors.Add(1)
				ferr = os.NewSyscallError("recvmmsg", errno)
				return true
			}
			e.decodeAll(k)
			if e.gro {
				rx.pendMsg, rx.pendOff, rx.pendCount = 0, 0, k
				for rx.pendMsg < rx.pendCount {
					m, _ := e.readGRO(pkts, true) // hands out what is pending, no read
					handle(pkts[:m])
				}
			} else {
				clearIovs(rx.iovs[:want])
				e.fillPlain(pkts, k)
				handle(pkts[:k])
			}
			if busyPoll > 0 {
				last = time.Now()
			} else if k < want {
				e.ctr.waits.Add(1)
				return false // the socket was drained: wait instead of reading again
			}
		}
	}
	if err := e.rc.Read(fn); err != nil {
		if e.closed.Load() || errors.Is(err, net.ErrClosed) {
			return errClosed
		}
		e.ctr.readErrors.Add(1)
		return fmt.Errorf("udp: read: %w", err)
	}
	return ferr
}

// armRecv points the receive iovecs at the GRO buffers (or, without GRO, at
// pkts' buffers), resets the message headers and returns how many messages
// to ask for. Every recvmmsg of the endpoint is armed here.
func (e *Endpoint) armRecv(pkts []link.Packet) int {
	rx := &e.rx
	n := len(pkts)
	if e.gro {
		n = min(groMsgs, e.batch)
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
