package cm

import (
	"testing"
	"time"

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
