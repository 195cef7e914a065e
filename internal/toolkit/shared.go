package toolkit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/softroce/softroce/verbs"
)

// GRHLen is the room ibv_ud_pingpong leaves for the GRH in receive buffers.
const GRHLen = 40

// MTUEnum is pp_mtu_to_enum: 0 for sizes other than 256..4096.
func MTUEnum(n int) verbs.MTU {
	switch n {
	case 256:
		return verbs.MTU256
	case 512:
		return verbs.MTU512
	case 1024:
		return verbs.MTU1024
	case 2048:
		return verbs.MTU2048
	case 4096:
		return verbs.MTU4096
	}
	return 0
}

// RandPSN returns a random 24-bit packet sequence number.
func RandPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xFFFFFF
}

// ErrConnRefused matches a TCP connection refused (the server is not listening yet).
var ErrConnRefused error = syscall.ECONNREFUSED

// Dial connects to the server, retrying while it is not listening yet
// (the C tools fail at once; a short grace period helps scripts that start
// both sides together).
func Dial(ctx context.Context, host string, port int, grace time.Duration) (net.Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	deadline := time.Now().Add(grace)
	var d net.Dialer
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) || !errors.Is(err, ErrConnRefused) {
			return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CQWaiter waits for completions the way the tools poll, adapted to a Go
// runtime: it spins (yielding the processor) for a short while, then arms
// the CQ and parks on its completion channel until the next completion. A
// hard spin, as the C tools do, would starve the device's own goroutines on
// small machines and make every round trip slower.
type CQWaiter struct {
	Ctx   context.Context
	CQ    *verbs.CQ
	Ch    *verbs.CompChannel
	empty int
	Spin  int // empty polls before parking (0: spinPolls)
	timer *time.Timer
	Alive func() error // when set, checked while parked: the peer is still there
}

// spinPolls is how many empty polls a CQWaiter spins before parking.
const spinPolls = 64

// Idle is called after an empty poll: it spins, or parks on the channel
// until a completion, a 10 ms tick (checking Alive) or the context's end.
func (w *CQWaiter) Idle() error {
	w.empty++
	spin := w.Spin
	if spin == 0 {
		spin = spinPolls
	}
	if w.empty < spin || w.Ch == nil {
		runtime.Gosched()
		return nil
	}
	if err := w.CQ.ReqNotify(false); err != nil {
		return err
	}
	if w.CQ.Len() > 0 {
		return nil
	}
	if w.timer == nil {
		w.timer = time.NewTimer(10 * time.Millisecond)
	} else {
		w.timer.Reset(10 * time.Millisecond)
	}
	select {
	case <-w.Ch.C():
		w.CQ.AckEvents(1)
	case <-w.timer.C:
		if w.Alive != nil {
			return w.Alive()
		}
	case <-w.Ctx.Done():
		return errors.New("interrupted")
	}
	return nil
}

// Progress is called after a poll that found completions.
func (w *CQWaiter) Progress() { w.empty = 0 }

// LatencySpin is the CQWaiter spin of the latency tools: with one processor
// (OneProc) a short spin, then parking, lets the device's receive goroutine
// run soonest; spinning longer measured slower on a 2-core machine.
const LatencySpin = 8

var oneProc struct {
	sync.Mutex
	n, prev int
	busy    int // OneProc users (latency tools): their devices busy-poll
}

// LatencyBusyPoll is how long the device of a latency tool (one that runs
// under OneProc) keeps polling its socket after each received batch
// (verbs.Config.BusyPoll): a ping-pong's reply then arrives without a
// thread wake-up, as perftest's C pollers busy-poll their CQ.
const LatencyBusyPoll = 50 * time.Microsecond

// latencyBusyPoll is the BusyPoll of a device opened now: LatencyBusyPoll
// under OneProc, else 0.
func latencyBusyPoll() time.Duration {
	oneProc.Lock()
	defer oneProc.Unlock()
	if oneProc.busy > 0 {
		return LatencyBusyPoll
	}
	return 0
}

// OneProc runs the process on one processor (GOMAXPROCS 1) unless the
// environment sets GOMAXPROCS, until the returned function is called. A
// ping-pong has one message in flight: the poller and the device's receive
// goroutine then hand over on one thread instead of waking each other
// across threads (half the context switches and CPU per round trip).
func OneProc() (restore func()) { return oneProcess(true) }

// OneProcBulk is OneProc for the bandwidth tools, without the latency
// tools' busy polling (which lowered a stream's rate). With one processor
// a completion's consumer runs when the device's receive goroutine yields
// to it, on the same thread. With two, write_bw -s 1048576 (every work
// request signalled, as perftest does) ran well below its rate on one, at
// a higher CPU cost per MiB, until link/udp sent from a socket the
// netpoller does not watch (udp.Config.SendFromBound); since then the two
// measure about the same, and one processor is kept (docs/speed.md,
// "Latency, busy polling and processors").
func OneProcBulk() (restore func()) { return oneProcess(false) }

func oneProcess(busy bool) (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	oneProc.Lock()
	if oneProc.n++; oneProc.n == 1 {
		oneProc.prev = runtime.GOMAXPROCS(1)
		if Logger != nil {
			Logger.Debug("toolkit: running on one processor; set GOMAXPROCS in the environment to choose",
				"GOMAXPROCS", 1, "was", oneProc.prev, "busy_poll", busy)
		}
	}
	if busy {
		oneProc.busy++
	}
	oneProc.Unlock()
	return func() {
		oneProc.Lock()
		if oneProc.n--; oneProc.n == 0 {
			runtime.GOMAXPROCS(oneProc.prev)
		}
		if busy {
			oneProc.busy--
		}
		oneProc.Unlock()
	}
}
