package cm

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
)

// TestHalfOpenDefaultFollowsBacklog: a listener's half-open bound defaults
// to its listen backlog (at least DefaultHalfOpen), so that a burst of
// real requests as large as the backlog is not cut short by evictions
// (stock cmtime -c 1000 lost connections to the fixed 128); an explicit
// SetHalfOpen still wins.
func TestHalfOpenDefaultFollowsBacklog(t *testing.T) {
	ch := NewEventChannel()
	defer ch.Close()
	for _, c := range []struct {
		backlog, set, want int
	}{
		{0, 0, 1024}, // Listen's default backlog
		{10, 0, DefaultHalfOpen},
		{2000, 0, 2000},
		{0, 5, 5},
	} {
		id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
		if c.set != 0 {
			id.SetHalfOpen(c.set)
		}
		if err := id.Listen(c.backlog); err != nil {
			t.Fatal(err)
		}
		if got := id.halfOpenMax(); got != c.want {
			t.Errorf("Listen(%d), SetHalfOpen(%d): bound %d, want %d", c.backlog, c.set, got, c.want)
		}
		id.Destroy()
	}

	// 300 requests accepted before any RTU: none is evicted.
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	sch, _ := listenAt(t, netip.AddrPortFrom(p.addrB(), 7330))
	for i := range 300 {
		p.ab.input(p.addrA(), spoofREQ(p.addrA(), p.addrB(), 7330, uint32(0x40000+i)))
		id := expect(t, sch, EventConnectRequest).ID
		defer id.Destroy()
		if err := id.Accept(&ConnParam{QPNum: uint32(0x300 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.ab.Stats().HalfOpenEvicted.Load(); n != 0 {
		t.Fatalf("%d of 300 half-open connections evicted", n)
	}
}

// TestGSIBurstWhileStalled: MADs that arrive while the agent's goroutine
// cannot run (here: its lock held for a while, as a descheduled thread
// holding it on a busy host does) wait in the GSI QP's receive queue: a
// burst of 3,000 is neither dropped for want of a receive buffer nor lost,
// and is handled once the agent runs again.
func TestGSIBurstWhileStalled(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	const n = 3000
	// DREQs for connections B does not know: each is received, counted and
	// dropped as unexpected, with no answer.
	var b []byte
	p.ab.mu.Lock()
	var unlock sync.Once
	release := func() { unlock.Do(p.ab.mu.Unlock) }
	t.Cleanup(release) // before the pair's cleanup, which takes the lock
	ds := p.db.Stats()
	// In chunks, each received before the next is sent: the pipe, as a
	// socket's buffer, holds 1,024 packets.
	for i := 0; i < n; {
		p.aa.mu.Lock()
		for end := i + 500; i < end; i++ {
			m := mad.DREQ{Header: mad.NewHeader(uint64(i + 1)), LocalCommID: uint32(0x50000 + i), RemoteCommID: uint32(0x60000 + i)}
			b, _ = m.Append(b[:0])
			p.aa.send(p.addrB(), b)
		}
		p.aa.mu.Unlock()
		waitFor(t, 10*time.Second, "the burst to reach B's device", func() bool { return ds.RxPackets.Load()+ds.DropNoRecv.Load() >= uint64(i) })
	}
	release()
	waitFor(t, 10*time.Second, "B's agent to take what it received", func() bool {
		return p.ab.Stats().MADsReceived.Load()+ds.DropNoRecv.Load() >= n
	})
	if d := p.db.Stats().DropNoRecv.Load(); d != 0 {
		t.Fatalf("%d of %d MADs dropped for want of a receive buffer", d, n)
	}
	if got := p.ab.Stats().MADsReceived.Load(); got != n {
		t.Fatalf("B's agent received %d MADs, want %d", got, n)
	}
}
