package cm

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// closeFixture is a listener on a pair's device B whose Options.Prepare
// blocks, on its call number block, until release is closed, so that a
// test can hold a connection request half-way while it closes the listener.
type closeFixture struct {
	p                  *pair
	pd                 *verbs.PD
	l                  *Listener
	prepared, released atomic.Int64
	release            chan struct{}
}

func newCloseFixture(t *testing.T, port uint16, backlog int, block int64) *closeFixture {
	t.Helper()
	f := &closeFixture{release: make(chan struct{})}
	f.p = newPair(t, pipe.Faults{}, pipe.Faults{}, &Config{Timeout: time.Second, MaxRetries: 15, TimeWait: 50 * time.Millisecond})
	var err error
	if f.pd, err = f.p.db.AllocPD(); err != nil {
		t.Fatal(err)
	}
	opts := &Options{PD: f.pd, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}, Backlog: backlog,
		HalfOpenTimeout: time.Minute, // a leaked half-open connection stays for the test's length
		Prepare: func(c *Conn) error {
			if f.prepared.Add(1) == block {
				<-f.release
			}
			return nil
		},
		Release: func(c *Conn) { f.released.Add(1) },
	}
	if f.l, err = Listen(netip.AddrPortFrom(f.p.addrB(), port).String(), opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.l.Close() })
	return f
}

// spoof injects a REQ to the listener from an address nobody answers from.
func (f *closeFixture) spoof(i int) {
	peer := netip.AddrFrom4([4]byte{10, 98, 0, byte(i)})
	f.p.ab.input(peer, spoofREQ(peer, f.p.addrB(), f.l.Addr().Port(), uint32(0x20000+i)))
}

// closeWhileBlocked closes the listener while Prepare is blocked: it lets
// Prepare go once Close has returned or has waited 300 ms, and fails if
// Close is still running 10 s later.
func (f *closeFixture) closeWhileBlocked(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f.l.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
	close(f.release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Listener.Close did not return")
	}
}

// checkClean fails unless everything the listener's connections held is
// given back: Release for every Prepare, the PD free, and the CM's IDs
// forgotten.
func (f *closeFixture) checkClean(t *testing.T) {
	t.Helper()
	waitFor(t, 5*time.Second, "Release for every Prepare", func() bool { return f.released.Load() == f.prepared.Load() })
	waitFor(t, 5*time.Second, "the CM to forget the connections", func() bool { return f.p.ab.IDs() == 0 })
	if err := f.pd.Dealloc(); err != nil {
		t.Errorf("the listener's PD still holds resources: %v", err)
	}
}

// TestListenerCloseRejectsQueuedRequests: connection requests queued for
// the listener's goroutine when Close runs (it is busy with an earlier one)
// are rejected and their IDs forgotten, as requests waiting for the backlog
// are. Close used to drop them with the event channel: their IDs stayed in
// MRA_REQ_SENT for good, and their peers heard nothing.
func TestListenerCloseRejectsQueuedRequests(t *testing.T) {
	f := newCloseFixture(t, 7310, 0, 1)
	f.spoof(1)
	waitFor(t, 5*time.Second, "the first request to reach Prepare", func() bool { return f.prepared.Load() == 1 })
	f.spoof(2)
	f.spoof(3)
	waitFor(t, 5*time.Second, "two requests queued behind it", func() bool { return f.l.ch.Len() == 2 })
	f.closeWhileBlocked(t)
	f.checkClean(t)
}

// TestListenerCloseWaitsForAccept: a request that Accept's goroutine takes
// from the backlog queue (Accept made room) and is setting up when Close
// runs is finished before Close disposes of the half-open connections.
// Close used to return first: the request then left its connection behind,
// REP sent, with its QP, its Prepare'd resources and its CM ID.
func TestListenerCloseWaitsForAccept(t *testing.T) {
	f := newCloseFixture(t, 7311, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, netip.AddrPortFrom(f.p.addrB(), 7311).String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 5*time.Second, "the dialled connection to wait for Accept", func() bool {
		f.l.mu.Lock()
		defer f.l.mu.Unlock()
		return len(f.l.ready) == 1
	})
	f.spoof(1) // backlog 1 is full: it waits
	waitFor(t, 5*time.Second, "the spoofed request to wait for the backlog", func() bool {
		f.l.mu.Lock()
		defer f.l.mu.Unlock()
		return len(f.l.waiting) == 1
	})
	accepted := make(chan *Conn, 1)
	go func() {
		sc, err := f.l.Accept(ctx) // makes room: sets up the spoofed request, blocked in Prepare
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- sc
	}()
	waitFor(t, 5*time.Second, "Accept to set up the spoofed request", func() bool { return f.prepared.Load() == 2 })
	f.closeWhileBlocked(t)
	if sc := <-accepted; sc != nil {
		sc.Close()
	}
	c.Close()
	f.checkClean(t)
}

// TestEventChannelCloseRejectsRequests: a connection request that nobody
// can take any more is rejected and its ID destroyed, as closing an rdma_cm
// event channel does, instead of staying in the CM for good:
//   - queued: closing the channel (rdma_destroy_event_channel) with the
//     request still queued on it, after destroying the listening ID as
//     documented;
//   - late: the request arrives after the channel was closed (its
//     listening ID left alive, against the documentation).
func TestEventChannelCloseRejectsRequests(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "queued", true: "late"}[late], func(t *testing.T) {
			p := newPair(t, pipe.Faults{}, pipe.Faults{}, &Config{Timeout: time.Second, MaxRetries: 15, TimeWait: 50 * time.Millisecond})
			ch := NewEventChannel()
			id, err := ch.CreateID(nil, mad.PortSpaceTCP)
			if err != nil {
				t.Fatal(err)
			}
			defer id.Destroy()
			if err := id.BindAddr(netip.AddrPortFrom(p.addrB(), 7312)); err != nil {
				t.Fatal(err)
			}
			if err := id.Listen(4); err != nil {
				t.Fatal(err)
			}
			peer := netip.MustParseAddr("10.98.1.1")
			if late {
				ch.Close()
			}
			p.ab.input(peer, spoofREQ(peer, p.addrB(), 7312, 0x30001))
			if !late {
				waitFor(t, 5*time.Second, "the request to be queued", func() bool { return ch.Len() == 1 })
				if err := id.Destroy(); err != nil {
					t.Fatal(err)
				}
				ch.Close()
			}
			waitFor(t, 5*time.Second, "the CM to forget the request's ID", func() bool { return p.ab.IDs() == 0 })
		})
	}
}
