package cm

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
)

// TestECE: the ECE a Connect and an Accept give travels in the REQ's and
// REP's vendor ID and attribute modifier and arrives in the peer's
// CONNECT_REQUEST and ESTABLISHED events; RejectReason(35) reaches the
// active side as REJECTED with reason VENDOR_OPTION_NOT_SUPPORTED; without
// ECE both sides see zeros.
func TestECE(t *testing.T) {
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, nil)
	var sch, cch *EventChannel
	port := uint16(5100)
	// Each case on channels and a listener of its own: the previous
	// case's teardown events stay on its channels.
	dial := func(ece ECE) *ID {
		port++
		sch, cch = NewEventChannel(), NewEventChannel()
		t.Cleanup(func() { sch.Close(); cch.Close() })
		lid, _ := sch.CreateID(nil, mad.PortSpaceTCP)
		lid.BindAddr(netip.AddrPortFrom(p.addrB(), port))
		lid.Listen(0)
		t.Cleanup(func() { lid.Destroy() })
		cid, _ := cch.CreateID(nil, mad.PortSpaceTCP)
		cid.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), port), 0)
		expect(t, cch, EventAddrResolved)
		cid.ResolveRoute(0)
		expect(t, cch, EventRouteResolved)
		rcQP(t, cid)
		if err := cid.Connect(&ConnParam{RetryCount: 7, RNRRetryCount: 7, ECE: ece}); err != nil {
			t.Fatal(err)
		}
		return cid
	}
	for _, c := range []struct{ req, rep ECE }{
		{ECE{VendorID: 0x02C9, Options: 0x80000003}, ECE{VendorID: 0x02C9, Options: 1}},
		{ECE{VendorID: 0xABCDEF, Options: 0xFFFFFFFF}, ECE{}},
		{ECE{}, ECE{}},
	} {
		cid := dial(c.req)
		ev := expect(t, sch, EventConnectRequest)
		if diff := cmp.Diff(c.req, ev.Param.ECE); diff != "" {
			t.Errorf("CONNECT_REQUEST ECE (-sent +received):\n%s", diff)
		}
		rcQP(t, ev.ID)
		if err := ev.ID.Accept(&ConnParam{RNRRetryCount: 7, ECE: c.rep}); err != nil {
			t.Fatal(err)
		}
		est := expect(t, cch, EventEstablished)
		if diff := cmp.Diff(c.rep, est.Param.ECE); diff != "" {
			t.Errorf("ESTABLISHED ECE (-sent +received):\n%s", diff)
		}
		expect(t, sch, EventEstablished)
		ev.ID.Destroy()
		cid.Destroy()
	}
	cid := dial(ECE{VendorID: 0x1234, Options: 7})
	defer cid.Destroy()
	ev := expect(t, sch, EventConnectRequest)
	if err := ev.ID.RejectReason([]byte("no"), mad.RejVendorOptionNotSupported); err != nil {
		t.Fatal(err)
	}
	ev.ID.Destroy()
	rej := expect(t, cch, EventRejected)
	if rej.Reason != mad.RejVendorOptionNotSupported || rej.Status != int(mad.RejVendorOptionNotSupported) {
		t.Errorf("REJECTED reason %v status %d, want 35", rej.Reason, rej.Status)
	}
}
