package udp

import (
	"errors"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// TestWaitReadable: WaitReadable returns when the socket gets a datagram
// (sock), when the other descriptor becomes readable (other), or at its
// timeout (neither); it reads nothing, and while a thread waits in it
// ServeView steps aside, so that the datagram is left for the waiter's
// Poll (ServeView, waiting on the socket beside it, handles at most 2 of 20).
// After Close it fails at once.
func TestWaitReadable(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	served, done := serveCounting(a)
	time.Sleep(10 * time.Millisecond) // ServeView waits on the empty socket
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)

	if sock, other, err := a.WaitReadable(efd, 20*time.Millisecond); err != nil || sock || other {
		t.Fatalf("idle: WaitReadable = %v, %v, %v; want the timeout", sock, other, err)
	}
	unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	if sock, other, err := a.WaitReadable(efd, 5*time.Second); err != nil || sock || !other {
		t.Fatalf("eventfd written: WaitReadable = %v, %v, %v; want other", sock, other, err)
	}
	var v [8]byte
	unix.Read(efd, v[:])

	pkts := linktest.Batch(16, 8192)
	got := 0
	for psn := range uint32(20) {
		res := make(chan [2]bool, 1)
		go func() {
			s, o, _ := a.WaitReadable(efd, 5*time.Second)
			res <- [2]bool{s, o}
		}()
		for a.waiters.Load() == 0 { // the waiter counts itself before poll(2)
			time.Sleep(100 * time.Microsecond)
		}
		w := linktest.Packet(nil, 0x0A, psn, linktest.Payload(int(psn), 64))
		wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
		before := served.Load()
		if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		var r [2]bool
	wait:
		for deadline := time.After(5 * time.Second); ; {
			select {
			case r = <-res:
				break wait
			case <-deadline:
				t.Fatalf("datagram %d: WaitReadable did not return", psn)
			case <-time.After(time.Millisecond):
				if served.Load() != before {
					// ServeView took it before it saw the waiter (counted
					// below): end the wait through the eventfd. The waiter
					// may have returned already, woken by the datagram
					// beside ServeView (sock, and no datagram left).
					unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
					r = <-res
					unix.Read(efd, v[:])
					if !r[0] && !r[1] {
						t.Fatalf("datagram %d: ServeView took it, and the eventfd then: WaitReadable = %v; want sock or other", psn, r)
					}
					r[0], r[1] = true, false
					break wait
				}
			}
		}
		if !r[0] || r[1] {
			t.Fatalf("datagram %d: WaitReadable = %v; want sock only", psn, r)
		}
		n, err := a.Poll(pkts, func([]link.Packet) {})
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	// ServeView, woken beside the waiter, may still read one before it sees
	// the waiter (a loaded runner, -race): at most 2 of 20. Without the step
	// aside it takes most of them.
	if got+int(served.Load()) != 20 || served.Load() > 2 {
		t.Fatalf("the waiter's Poll got %d of 20 datagrams, ServeView %d", got, served.Load())
	}
	a.Close()
	if err := <-done; err == nil {
		t.Fatal("ServeView after Close: nil error")
	}
	if _, _, err := a.WaitReadable(-1, time.Second); err == nil {
		t.Fatal("WaitReadable after Close: nil error")
	}
}

// TestWaitReadableClose: Close ends a WaitReadable in progress at once
// (shutdown(2) wakes its poll), not at its timeout, and does not wait for
// it to time out either.
func TestWaitReadableClose(t *testing.T) {
	a := listen(t, "127.0.0.1:0")
	ret := make(chan error, 1)
	go func() {
		_, _, err := a.WaitReadable(-1, time.Minute)
		ret <- err
	}()
	for a.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a WaitReadable of a minute")
	}
	select {
	case <-ret:
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReadable still waiting 10 s after Close")
	}
}

// TestWaitReadableSignal: a signal of the program's that reaches the
// waiting thread ends the wait with an error wrapping EINTR (a C
// program's blocking rsocket call then returns EINTR), instead of waiting
// on to the timeout; the runtime's preemption signal (SIGURG) does not.
func TestWaitReadableSignal(t *testing.T) {
	usr := make(chan os.Signal, 1)
	signal.Notify(usr, unix.SIGUSR1)
	defer signal.Stop(usr)
	a := listen(t, "127.0.0.1:0")
	ret := make(chan error, 1)
	tid := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		_, _, err := a.WaitReadable(-1, time.Minute)
		ret <- err
	}()
	id := <-tid
	for a.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(10 * time.Millisecond) // inside poll(2)
	// SIGURG: the Go runtime's own preemption signal, handled and harmless.
	if err := unix.Tgkill(unix.Getpid(), id, unix.SIGURG); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ret:
		t.Fatalf("SIGURG ended WaitReadable: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := unix.Tgkill(unix.Getpid(), id, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ret:
		if !errors.Is(err, unix.EINTR) {
			t.Fatalf("WaitReadable = %v, want EINTR", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a signal did not end WaitReadable in 10 s")
	}
}

// TestWaitReadableAsideSleeps: while a thread waits in WaitReadable,
// ServeView, aside, sleeps until the waiter leaves instead of waking every
// pollAside (a program's thread may wait for CM events all its life: 2,000
// wake-ups a second for nothing), and once the waiter has gone it reads
// again.
func TestWaitReadableAsideSleeps(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	served, done := serveCounting(a)
	defer func() { a.Close(); <-done }()
	time.Sleep(10 * time.Millisecond) // ServeView waits on the empty socket
	send := func(psn uint32) {
		w := linktest.Packet(nil, 0x0A, psn, linktest.Payload(int(psn), 64))
		wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
		if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	// A thread waits, takes the datagram that woke it (as the C library's
	// rdma_get_cm_event does) and waits again, 100 ms, for nothing: the
	// datagram sent ServeView aside, and it sleeps through the second wait.
	type result struct {
		sock, idle bool
		polled     int
		asides     uint64
		err        error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		pkts := linktest.Batch(16, 8192)
		if r.sock, _, r.err = a.WaitReadable(-1, 5*time.Second); r.err == nil {
			r.polled, r.err = a.Poll(pkts, func([]link.Packet) {})
		}
		if r.err == nil {
			s0 := a.Stats().Asides
			var sock bool
			sock, _, r.err = a.WaitReadable(-1, 100*time.Millisecond)
			r.idle, r.asides = !sock, a.Stats().Asides-s0
		}
		res <- r
	}()
	for a.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	send(1)
	r := <-res
	if r.err != nil || !r.sock || r.polled+int(served.Load()) != 1 || !r.idle {
		t.Fatalf("waiter: %+v, ServeView served %d", r, served.Load())
	}
	if served.Load() != 0 {
		t.Skipf("ServeView read the datagram before it saw the waiter (a loaded runner): nothing to measure")
	}
	if r.asides > 5 {
		t.Errorf("ServeView woke %d times while a thread waited 100 ms, want at most 5 (a step every %v is %d)", r.asides, pollAside, 100*time.Millisecond/pollAside)
	}
	// The waiter gone, ServeView reads again.
	send(2)
	deadline := time.Now().Add(5 * time.Second)
	for served.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if served.Load() != 1 {
		t.Fatalf("ServeView served %d datagrams after the waiter left, want 1", served.Load())
	}
}

// TestWaitReadableOneWatcher: while a thread waits on the socket, a second
// WaitReadable that gives an fd waits on that fd alone: a datagram wakes
// the first only, and the second returns when its fd is written (by what
// the first handles, in the C library), with sock false.
func TestWaitReadableOneWatcher(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	defer a.Close()
	efd1, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	efd2, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	defer unix.Close(efd1)
	defer unix.Close(efd2)
	type res struct{ sock, other bool }
	first, second := make(chan res, 1), make(chan res, 1)
	go func() {
		s, o, _ := a.WaitReadable(efd1, 5*time.Second)
		first <- res{s, o}
	}()
	for a.waiters.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	go func() {
		s, o, _ := a.WaitReadable(efd2, 5*time.Second)
		second <- res{s, o}
	}()
	time.Sleep(20 * time.Millisecond) // the second waits on efd2
	w := linktest.Packet(nil, 0x0A, 1, linktest.Payload(1, 64))
	wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
	if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if r := <-first; !r.sock || r.other {
		t.Fatalf("the socket's watcher: %+v, want sock", r)
	}
	select {
	case r := <-second:
		t.Fatalf("the second waiter woke for the datagram: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	unix.Write(efd2, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	if r := <-second; r.sock || !r.other {
		t.Fatalf("the second waiter: %+v, want its fd alone", r)
	}
}

// serveCounting runs a's ServeView on a goroutine of its own, counting the
// datagrams it handles; done receives what it returns.
func serveCounting(a *Endpoint) (served *atomic.Int64, done chan error) {
	served, done = new(atomic.Int64), make(chan error, 1)
	go func() {
		done <- a.ServeView(linktest.Batch(16, 8192), 0, func(pkts []link.Packet) { served.Add(int64(len(pkts))) })
	}()
	return served, done
}

// TestWaitReadableComeAndGo: a thread that waits in WaitReadable until
// woken through its fd, and comes back at once, again and again (a
// blocking ping-pong: one wait per message), does not wake ServeView,
// aside, at every return: ServeView steps aside a pollAside at a time
// while the thread keeps coming back. It used to sleep until the thread
// left, each time: a thread wake-up per message.
func TestWaitReadableComeAndGo(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	served, done := serveCounting(a)
	defer func() { a.Close(); <-done }()
	time.Sleep(10 * time.Millisecond) // ServeView waits on the empty socket
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	w := linktest.Packet(nil, 0x0A, 1, linktest.Payload(1, 64))
	wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
	const pings = 3000
	ack := make(chan struct{})
	errc := make(chan error, 2)
	go func() {
		// The datagram that sends ServeView aside finds the thread
		// waiting; then the pings, each after the last was taken.
		for a.waiters.Load() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
			errc <- err
			return
		}
		<-ack
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		for range pings {
			if _, err := unix.Write(efd, one); err != nil {
				errc <- err
				return
			}
			<-ack
		}
		errc <- nil
	}()
	pkts := linktest.Batch(16, 8192)
	var s0 uint64
	var start time.Time
	buf := make([]byte, 8)
	for i := 0; i <= pings; i++ {
		sock, other, err := a.WaitReadable(efd, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 0 && sock:
			if _, err := a.Poll(pkts, func([]link.Packet) {}); err != nil {
				t.Fatal(err)
			}
			s0, start = a.Stats().Asides, time.Now()
		case i > 0 && other:
			if _, err := unix.Read(efd, buf); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("wait %d: sock %v, fd %v", i, sock, other)
		}
		ack <- struct{}{}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	asides, took := a.Stats().Asides-s0, time.Since(start)
	if served.Load() != 0 {
		t.Skipf("ServeView read the datagram before it saw the waiter (a loaded runner): nothing to measure")
	}
	// Each step sleeps pollAside; a step cut short by a thread that left
	// after waiting a whole step (a loaded runner) is allowed for.
	if limit := uint64(took/pollAside)*5/4 + 10; asides > limit {
		t.Errorf("ServeView woke %d times in %v while a thread waited and returned %d times, want at most %d (a step every %v)",
			asides, took, pings, limit, pollAside)
	}
	t.Logf("%d waits in %v: ServeView stepped %d times", pings, took, asides)
}

// TestWaitReadableWaitsForStep: while another reader's step holds what the
// lanes brought (ServeView's handler, stopped mid-batch), WaitReadable
// waits for that step to end instead of returning at once: a caller that
// alternates Poll, which gives way to the step, and WaitReadable would
// otherwise spin, on the processor the stopped reader may be waiting for
// (a C program's CM thread did, a thousand turns at a time).
func TestWaitReadableWaitsForStep(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	hold, inStep, free := holdFirst()
	defer free() // a failure below must not leave the handler holding Close
	done := make(chan error, 1)
	go func() { done <- b.ServeView(linktest.Batch(16, 8192), 0, func([]link.Packet) { hold() }) }()
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	select {
	case <-inStep:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeView did not handle the first datagram")
	}
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0) // waits in the lane
	efd := testEventfd(t, 0)
	res := waitReadableAsync(b, efd)
	select {
	case err := <-res:
		t.Fatalf("WaitReadable returned (%v) while ServeView's step held the lanes' record", err)
	case <-time.After(100 * time.Millisecond):
	}
	free()
	unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}) // in case ServeView took the record first
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("WaitReadable after the step: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReadable did not return after the step ended")
	}
	b.Close()
	<-done
}

// TestServeStepsAfterReleases: ServeSteps calls after once the step's hold
// on the endpoint is released, so that a reader beside it (WaitReadable,
// which waits for a step to end) is not held up by what after does (the
// receive loop's yield to a goroutine its batch woke).
func TestServeStepsAfterReleases(t *testing.T) {
	a, b := localPair(t, "127.0.0.1:0")
	hold, inAfter, free := holdFirst()
	defer free()
	done := make(chan error, 1)
	var handled atomic.Bool
	go func() {
		done <- b.ServeSteps(linktest.Batch(16, 8192), 0, func([]link.Packet) { handled.Store(true) }, func() {
			if handled.Load() {
				hold()
			}
		})
	}()
	sendOne(t, a, b.LocalAddr(), netip.AddrPort{}, 0)
	select {
	case <-inAfter:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeSteps did not call after the step that handled the datagram")
	}
	res := waitReadableAsync(b, testEventfd(t, 1)) // readable
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("WaitReadable: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WaitReadable waited while ServeSteps' after ran: after was called inside the step")
	}
	free()
	b.Close()
	<-done
}

// testEventfd returns a non-blocking eventfd holding count, closed when the
// test ends.
func testEventfd(t *testing.T, count uint) int {
	t.Helper()
	efd, err := unix.Eventfd(count, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	return efd
}

// waitReadableAsync calls ep.WaitReadable(fd, 5 s) on a goroutine of its
// own and sends its error on the channel it returns.
func waitReadableAsync(ep *Endpoint, fd int) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, _, err := ep.WaitReadable(fd, 5*time.Second)
		res <- err
	}()
	return res
}

// holdFirst returns hold, whose first call closes entered and blocks until
// release (which may be called more than once); later calls return at once.
func holdFirst() (hold func(), entered <-chan struct{}, release func()) {
	in, rel := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var once sync.Once
	hold = func() {
		if first.CompareAndSwap(false, true) {
			close(in)
			<-rel
		}
	}
	return hold, in, func() { once.Do(func() { close(rel) }) }
}
