package rsocket

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestNonblockingPollMode: on a device whose link can be polled (UDP), a
// non-blocking call that finds nothing receives what the socket holds on
// the caller's goroutine (verbs.Device.PollLink) and, with nothing there,
// fails with EAGAIN at once instead of parking; a program spinning on
// EAGAIN (rstream's default mode) then drives the device itself. 50
// ping-pongs of non-blocking calls go through, some datagrams were handled
// by the callers' polls (the device's RxPolled), and a Recv with nothing
// to read returns EAGAIN.
func TestNonblockingPollMode(t *testing.T) {
	p := newUDPPair(t)
	c, s := connect(t, p, nil, nil)
	c.SetNonblock(true)
	s.SetNonblock(true)
	var b [64]byte
	if _, err := c.Read(b[:]); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Read with nothing sent: %v, want EAGAIN", err)
	}
	spin := func(f func() (int, error)) {
		t.Helper()
		end := time.Now().Add(10 * time.Second)
		for {
			n, err := f()
			if n > 0 {
				return
			}
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatal(err)
			}
			if time.Now().After(end) {
				t.Fatal("no data within 10 s of spinning")
			}
		}
	}
	polled := func() uint64 { return p.da.Stats().RxPolled.Load() + p.db.Stats().RxPolled.Load() }
	polledBefore := polled()
	// The device's goroutine may still take some datagrams (until it sees
	// the callers polling and steps aside, or while a loaded machine
	// deschedules them): up to 10 rounds of 50 exchanges for one polled.
	for round := 0; round < 10 && polled() == polledBefore; round++ {
		for range 50 {
			spin(func() (int, error) { return c.Write(b[:]) })
			spin(func() (int, error) { return s.Read(b[:]) })
			spin(func() (int, error) { return s.Write(b[:]) })
			spin(func() (int, error) { return c.Read(b[:]) })
		}
	}
	if polled() == polledBefore {
		t.Fatal("no datagram handled by a non-blocking call's poll in 500 exchanges (RxPolled 0)")
	}
}

// TestPollDrivesLink: Poll (rpoll's check) that finds nothing ready
// receives what the device's socket holds on the caller's thread, as a
// non-blocking call does: a program spinning on rpoll with a zero timeout
// (rstream -T a) moves the data itself instead of waiting for the device's
// goroutine it keeps from running.
func TestPollDrivesLink(t *testing.T) {
	p := newUDPPair(t)
	c, s := connect(t, p, nil, nil)
	c.SetNonblock(true)
	s.SetNonblock(true)
	var b [64]byte
	if rev := s.Poll(PollIn, false); rev&PollIn != 0 {
		t.Fatalf("Poll before anything was sent = %#x, want no PollIn", rev)
	}
	polledBefore := p.db.Stats().RxPolled.Load()
	// As in TestNonblockingPollMode: up to 500 messages for one polled.
	for i := 0; i < 500 && (i < 50 || p.db.Stats().RxPolled.Load() == polledBefore); i++ {
		for {
			if _, err := c.Write(b[:]); err == nil {
				break
			} else if !errors.Is(err, syscall.EAGAIN) {
				t.Fatal(err)
			}
			c.Poll(PollOut, false)
		}
		end := time.Now().Add(10 * time.Second)
		for s.Poll(PollIn, false)&PollIn == 0 {
			if time.Now().After(end) {
				t.Fatalf("message %d: not readable within 10 s of polling", i)
			}
		}
		if _, err := s.Read(b[:]); err != nil {
			t.Fatalf("message %d: Read after PollIn: %v", i, err)
		}
	}
	if n := p.db.Stats().RxPolled.Load() - polledBefore; n == 0 {
		t.Fatal("no datagram handled by Poll on the receiving side (RxPolled 0)")
	}
	// Without link (rpoll's other rsockets of a round) the socket is
	// left alone: the device's goroutine delivers.
	if _, err := c.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	polledBefore = p.db.Stats().RxPolled.Load()
	end := time.Now().Add(10 * time.Second)
	for {
		rev, polled := s.PollLinked(PollIn, false, false)
		if polled {
			t.Fatal("PollLinked without link polled the device's socket")
		}
		if rev&PollIn != 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("not readable within 10 s without polling the link")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if n := p.db.Stats().RxPolled.Load() - polledBefore; n != 0 {
		t.Errorf("PollLinked without link: %d datagrams polled, want 0", n)
	}
}

// TestNonblockingNeverParks: on a device whose link can be polled, a
// non-blocking call never sleeps, even when its poll brought part of a
// message (a 64 KiB transfer is 16 datagrams, which a poll may take in
// several batches). Each such call once armed the CQs and parked up to
// nbPark for the rest: a spinning receiver then slept through most of a
// stream (stock rstream's default mode ran at half the speed).
func TestNonblockingNeverParks(t *testing.T) {
	p := newUDPPair(t)
	c, s := connect(t, p, nil, nil)
	c.SetNonblock(true)
	s.SetNonblock(true)
	const total = 8 << 20
	out := make([]byte, 1<<20)
	for i := range out {
		out[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		end := time.Now().Add(20 * time.Second)
		for sent := 0; sent < total; {
			n, err := c.Write(out[:min(len(out), total-sent)])
			sent += n
			if err != nil && !errors.Is(err, syscall.EAGAIN) {
				done <- err
				return
			}
			if time.Now().After(end) {
				done <- errors.New("sender: not done within 20 s")
				return
			}
		}
		done <- nil
	}()
	in := make([]byte, 1<<20)
	end := time.Now().Add(20 * time.Second)
	for got := 0; got < total; {
		n, err := s.Read(in)
		for i := range n {
			if in[i] != byte((got+i)%len(out)*7) {
				t.Fatalf("byte %d = %#x, want %#x", got+i, in[i], byte((got+i)%len(out)*7))
			}
		}
		got += n
		if err != nil && !errors.Is(err, syscall.EAGAIN) {
			t.Fatal(err)
		}
		if time.Now().After(end) {
			t.Fatalf("received %d of %d bytes in 20 s", got, total)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := c.Stats.Parks.Load() + s.Stats.Parks.Load(); n != 0 {
		t.Fatalf("non-blocking calls parked %d times (sender %d, receiver %d), want 0",
			n, c.Stats.Parks.Load(), s.Stats.Parks.Load())
	}
}
