package udp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/linktest"
	"github.com/softroce/softroce/wire"
)

// TestServeStepsAside: without Config.Netpoll, while a caller polls the
// socket in a loop (Poll) ServeView takes it out of the netpoller (no
// epoll instance watches it) and sleeps, so datagrams the poller takes do
// not wake it (Waits for at most half of them, as the poller loses its
// processor now and then on a loaded machine, against one a datagram
// without stepping aside; Stats.Asides counts its sleeps); when the
// poller stops, ServeView takes the socket back (watched
// again) and handles what arrives; Close ends its sleep. With Netpoll it
// does not step aside.
func TestServeStepsAside(t *testing.T) {
	for _, mode := range []struct {
		name    string
		opts    []Option
		stepped bool
	}{{"raw", nil, true}, {"netpoll", []Option{WithNetpoll()}, false}} {
		t.Run(mode.name, func(t *testing.T) {
			a, b := listen(t, "127.0.0.1:0", mode.opts...), listen(t, "127.0.0.1:0")
			served, done := serveCounting(a)
			psn := uint32(0)
			send := func() {
				t.Helper()
				w := linktest.Packet(nil, 0x0A, psn, linktest.Payload(int(psn), 64))
				psn++
				wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
				if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(10 * time.Millisecond) // ServeView waits on the empty socket
			var polled atomic.Int64
			stop := pollBusily(a, nil, func(n int, _ error) bool { polled.Add(int64(n)); return true })
			// The first datagram waits for ServeView: the poller's reads
			// fail while the test holds the read lock (Poll's TryLock), so
			// ServeView wakes for it and finds the poller busy. (Datagrams
			// the poller takes at once need not wake ServeView at all.)
			a.rd.Lock()
			time.Sleep(5 * time.Millisecond) // the poller gets busy
			send()
			deadline := time.Now().Add(5 * time.Second)
			for a.Stats().Asides == 0 && a.Stats().Waits == 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			a.rd.Unlock()
			const n = 40
			var waits, asides uint64
			var watched bool
			// A poller descheduled for a step on a loaded machine lets
			// ServeView read (and wait) now and then, and register the
			// socket again for that while: a batch that shows it is
			// followed by another, up to five, and the socket is looked
			// at every ten datagrams (out of the netpoller at least once
			// while the poller is busy).
			for attempt := 1; attempt <= 5; attempt++ {
				s0 := a.Stats()
				watched = true
				for i := 0; i < n; i++ {
					send()
					time.Sleep(300 * time.Microsecond)
					if i%10 == 9 && !epollWatchedInodes(t)[sockInode(t, a)] {
						watched = false
					}
				}
				time.Sleep(5 * time.Millisecond)
				// While it steps aside the socket is out of the netpoller.
				if !epollWatchedInodes(t)[sockInode(t, a)] {
					watched = false
				}
				s1 := a.Stats()
				waits, asides = s1.Waits-s0.Waits, s1.Asides
				t.Logf("batch %d, %d datagrams: %d polled, %d served; ServeView waited %d times, slept %d times", attempt, n, polled.Load(), served.Load(), waits, asides)
				if !mode.stepped || (!watched && waits <= n/2 && asides > 0) {
					break
				}
			}
			if watched == mode.stepped {
				t.Errorf("the socket watched by the netpoller while a poller is busy: %v, want %v", watched, !mode.stepped)
			}
			if mode.stepped {
				if waits > n/2 || asides == 0 {
					t.Errorf("ServeView waited on the socket %d times for %d datagrams a busy poller took (slept %d times): want it to step aside", waits, n, asides)
				}
			} else if asides != 0 {
				t.Errorf("Netpoll: ServeView slept %d times, want 0", asides)
			}
			stop()
			before := served.Load()
			send()
			deadline = time.Now().Add(5 * time.Second)
			for served.Load() == before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if served.Load() == before {
				t.Fatal("ServeView did not take back the socket within 5 s of the poller stopping")
			}
			if !epollWatchedInodes(t)[sockInode(t, a)] {
				t.Error("ServeView waits again, but its socket is not watched by the netpoller")
			}

			// Close ends a sleep: keep the poller busy while closing.
			stop = pollBusily(a, nil, func(_ int, err error) bool { return err == nil })
			time.Sleep(5 * time.Millisecond)
			start := time.Now()
			if err := a.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("ServeView after Close = %v, want net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ServeView did not return within 5 s of Close")
			}
			stop()
			t.Logf("Close and ServeView's return took %v", time.Since(start))
		})
	}
}

// TestCloseWakesReader: Close wakes a reader waiting on the socket at once,
// and a second Close reports net.ErrClosed.
func TestCloseWakesReader(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			a := listen(t, addr)
			done := make(chan error, 1)
			go func() {
				_, err := a.ReadBatch(linktest.Batch(4, 8192))
				done <- err
			}()
			time.Sleep(20 * time.Millisecond) // the reader waits
			start := time.Now()
			a.Close()
			select {
			case err := <-done:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadBatch still blocked 5 s after Close")
			}
			if d := time.Since(start); d >= rawWaitMs*time.Millisecond/2 {
				t.Errorf("Close took %v to wake the reader: want it woken at once", d)
			}
			if err := a.sock.Close(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("second close = %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestServeStepsAsideUnwoken: a poller that becomes busy while ServeView
// waits on the socket wakes it to step aside, though no datagram does (the
// poller takes each before ServeView could be woken for it): without that
// wake-up, ServeView waited with its socket in the netpoller as long as the
// poller ran, and every datagram woke a thread of the runtime.
func TestServeStepsAsideUnwoken(t *testing.T) {
	a := listen(t, "127.0.0.1:0")
	served, done := serveCounting(a)
	defer func() { a.Close(); <-done }()
	waitUntil(t, 5*time.Second, "ServeView waits on the empty socket", func() bool { return a.Stats().Waits > 0 })
	stop := pollBusily(a, nil, nil)
	waitUntil(t, 5*time.Second, "ServeView steps aside for the busy poller", func() bool { return a.Stats().Asides > 0 })
	waitUntil(t, 5*time.Second, "the socket out of the netpoller", func() bool { return !epollWatchedInodes(t)[sockInode(t, a)] })
	stop()
	if s := served.Load(); s != 0 {
		t.Errorf("ServeView served %d datagrams, none sent", s)
	}
}

// TestServeStepsAsideNotForOldPolls: Poll calls made during ServeView's
// own step (while it holds the read) do not send it aside when it is woken
// after the poller went quiet: it counts the calls made while it waited. It
// counted them from before its step, and so stepped aside (and took its
// socket out of the netpoller) for a poller that had stopped, when the
// step was long (its thread descheduled on a loaded machine).
func TestServeStepsAsideNotForOldPolls(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	var served atomic.Int64
	done := make(chan error, 1)
	pp := linktest.Batch(16, 8192)
	go func() {
		done <- a.ServeView(linktest.Batch(16, 8192), 0, func(pkts []link.Packet) {
			if served.Add(int64(len(pkts))) == 1 {
				// A poller beside the step: its calls find the read
				// taken (and return at once), and stop.
				for range 4 * pollBusy {
					a.Poll(pp, func([]link.Packet) {})
				}
			}
		})
	}()
	defer func() { a.Close(); <-done }()
	waitUntil(t, 5*time.Second, "ServeView waits on the empty socket", func() bool { return a.Stats().Waits > 0 })
	for psn := range uint32(2) {
		w := linktest.Packet(nil, 0x0A, psn, linktest.Payload(int(psn), 64))
		wire.FillICRC(w, b.SendAddr(), a.LocalAddr(), 0)
		if _, err := b.WriteBatch([]link.Packet{{Buf: w, N: len(w), Dst: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 5*time.Second, "ServeView serves the datagram", func() bool { return served.Load() > int64(psn) })
		time.Sleep(4 * pollAside) // the poller is quiet
	}
	if s := a.Stats(); s.Asides != 0 {
		t.Errorf("ServeView stepped aside %d times for Poll calls made during its step, before the wait the next datagram ended", s.Asides)
	}
	if !epollWatchedInodes(t)[sockInode(t, a)] {
		t.Error("ServeView waits, but its socket is not watched by the netpoller")
	}
}

// waitUntil waits up to d for cond, failing the test after.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// pollBusily calls ep.Poll in a loop on a goroutine of its own (a busy
// poller, as a C program's thread spinning on its CQs), handing what it
// reads to handle (nil: dropped) and each call's result to each (nil:
// none), until each returns false or stop is called; stop waits for the
// loop to end.
func pollBusily(ep *Endpoint, handle func([]link.Packet), each func(n int, err error) bool) (stop func()) {
	if handle == nil {
		handle = func([]link.Packet) {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		pkts := linktest.Batch(16, 8192)
		for {
			select {
			case <-quit:
				return
			default:
			}
			n, err := ep.Poll(pkts, handle)
			if each != nil && !each(n, err) {
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit) }); <-done }
}
