package cm

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
)

// FuzzAgentInput feeds MADs to an agent with listeners: it must never
// panic, whatever arrives, and it must account for every MAD: each one
// received is counted exactly once as handled, duplicate, malformed,
// unknown, unexpected or dropped for the backlog.
func FuzzAgentInput(f *testing.F) {
	hdr := mad.CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1")}
	pd, _ := hdr.Append(nil)
	sid := mad.ServiceID(mad.PortSpaceTCP, 7174)
	seeds := []mad.Message{
		&mad.REQ{LocalCommID: 5, ServiceID: sid, LocalQPN: 0x20, StartingPSN: 7, PathMTU: 3, PrivateData: pd},
		&mad.REQ{LocalCommID: 7, ServiceID: sid, LocalQPN: 0x21}, // no rdma_cm header: malformed body
		&mad.SIDRREQ{RequestID: 10, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174)},
		&mad.REP{LocalCommID: 6, RemoteCommID: 5},
		&mad.RTU{LocalCommID: 5, RemoteCommID: 6},
		&mad.MRA{LocalCommID: 6, RemoteCommID: 5},
		&mad.REJ{LocalCommID: 6, RemoteCommID: 5, Reason: mad.RejConsumerDefined},
		&mad.DREQ{LocalCommID: 5, RemoteCommID: 6},
		&mad.DREP{LocalCommID: 6, RemoteCommID: 5},
		&mad.SIDRREQ{RequestID: 9, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174), PrivateData: pd},
		&mad.SIDRREP{RequestID: 9},
	}
	for _, m := range seeds {
		b, err := m.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:mad.HeaderLen+8]) // a truncated body: malformed
	}
	p := newPair(f, pipe.Faults{}, pipe.Faults{}, nil)
	l, err := Listen("0.0.0.0:7174", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	lu, err := Listen("0.0.0.0:7174", &Options{PortSpace: mad.PortSpaceUDP})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { lu.Close() })
	// Only the fuzzer's MADs reach the agent: its answers go nowhere.
	drop := func(*link.Packet) pipe.Verdict { return pipe.Drop }
	p.pa.SetFilter(drop)
	p.pb.SetFilter(drop)
	st := p.aa.Stats()
	outcomes := func() uint64 {
		return st.Handled.Load() + st.Duplicates.Load() + st.DropMalformed.Load() + st.DropUnknown.Load() +
			st.DropUnexpected.Load() + st.DropBacklog.Load()
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r0, o0 := st.MADsReceived.Load(), outcomes()
		p.aa.input(p.addrB(), b)
		if dr, do := st.MADsReceived.Load()-r0, outcomes()-o0; dr != 1 || do != 1 {
			t.Fatalf("one MAD in: %d received, %d outcomes counted (want 1 and 1)\n% x", dr, do, b)
		}
	})
}
