package cm

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
)

// FuzzAgentInput feeds MADs to an agent with a listener: it must never
// panic, whatever arrives.
func FuzzAgentInput(f *testing.F) {
	hdr := mad.CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1")}
	pd, _ := hdr.Append(nil)
	sid := mad.ServiceID(mad.PortSpaceTCP, 7174)
	seeds := []mad.Message{
		&mad.REQ{LocalCommID: 5, ServiceID: sid, LocalQPN: 0x20, StartingPSN: 7, PathMTU: 3, PrivateData: pd},
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
	f.Fuzz(func(t *testing.T, b []byte) {
		p.aa.Input(p.addrB(), b)
	})
}
