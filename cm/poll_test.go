package cm

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
)

// TestAgentPoll: with the agents' goroutines not running, Poll alone
// handles the MADs, in order, on the caller: a connection is requested,
// accepted and established on both sides, and each Poll reports the MADs
// it handled (REQ and RTU on the passive side, REP on the active one).
func TestAgentPoll(t *testing.T) {
	cfg := testConfig()
	cfg.pollOnly = true
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	sch, cch, cid := listenDial(t, p, 5200)
	if err := cid.Connect(&ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	var polledA, polledB int
	// until polls both agents until ch holds an event, and returns it.
	until := func(ch *EventChannel, want EventType) *Event {
		t.Helper()
		end := time.Now().Add(5 * time.Second)
		for {
			if ev, ok := ch.TryGet(); ok {
				if ev.Type != want {
					t.Fatalf("event %v, want %v", ev.Type, want)
				}
				return ev
			}
			if time.Now().After(end) {
				t.Fatalf("no %v within 5 s of polling (Poll handled %d and %d MADs)", want, polledA, polledB)
			}
			polledA += p.aa.Poll()
			polledB += p.ab.Poll()
			time.Sleep(100 * time.Microsecond)
		}
	}
	req := until(sch, EventConnectRequest)
	defer req.ID.Destroy()
	rcQP(t, req.ID)
	if err := req.ID.Accept(&ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	until(cch, EventEstablished)
	until(sch, EventEstablished)
	if polledA != 1 || polledB != 2 {
		t.Errorf("Poll handled %d MADs on the active side and %d on the passive one, want 1 (REP) and 2 (REQ, RTU)", polledA, polledB)
	}
	if n := testing.AllocsPerRun(100, func() { p.aa.Poll() }); n != 0 {
		t.Errorf("Poll with nothing to handle: %v allocations, want 0", n)
	}
	p.ab.Close()
	if n := p.ab.Poll(); n != 0 {
		t.Errorf("Poll after Close handled %d MADs", n)
	}
}

// TestAgentPollBounded: one Poll handles at most pollMADs MADs, so that a
// thread that polls for its events (rdma_get_cm_event) takes the events of
// a burst as it goes, instead of turning the whole burst into events first:
// with a listen backlog counting events not yet taken (SetBacklogOnTake),
// a burst of 2,000 REQs handled in one Poll overflowed the 1,024 and lost
// requests to a 6 s resend. The rest wait for the next Poll.
func TestAgentPollBounded(t *testing.T) {
	cfg := testConfig()
	cfg.pollOnly = true
	// No REQ resent while the test is slow (the race detector): each REQ
	// is one MAD to count.
	cfg.Timeout = 10 * time.Second
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	sch, cch, _ := listenDial(t, p, 5201)
	const n = 3*pollMADs + 10
	for range n {
		id, err := cch.CreateID(nil, mad.PortSpaceTCP)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), 5201), 0)
		expect(t, cch, EventAddrResolved)
		id.ResolveRoute(0)
		expect(t, cch, EventRouteResolved)
		rcQP(t, id)
		if err := id.Connect(nil); err != nil {
			t.Fatal(err)
		}
	}
	// The REQs reach the passive GSI QP (the pipe delivers on its own).
	got, polls := 0, 0
	end := time.Now().Add(5 * time.Second)
	for got < n && time.Now().Before(end) {
		k := p.ab.Poll()
		if k > pollMADs {
			t.Fatalf("one Poll handled %d MADs, want at most %d", k, pollMADs)
		}
		if k > 0 {
			polls++
		}
		got += k
		if k < pollMADs {
			time.Sleep(time.Millisecond)
		}
	}
	if got != n || polls < 4 {
		t.Fatalf("%d Polls handled %d of %d REQs", polls, got, n)
	}
	if sch.Len() != n {
		t.Errorf("%d CONNECT_REQUESTs queued, want %d", sch.Len(), n)
	}
}
