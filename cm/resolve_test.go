package cm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/link/pipe"
)

// TestResolveAddrNeighbour: with Config.Resolve, ResolveAddr reports what
// it says, and ETIMEDOUT when it does not answer within the timeout (an
// address nobody answers ARP for), as rdma_resolve_addr.
func TestResolveAddrNeighbour(t *testing.T) {
	silent := netip.MustParseAddr("10.98.0.99")
	refused := netip.MustParseAddr("10.98.0.98")
	cfg := testConfig()
	cfg.Resolve = func(ctx context.Context, src, dst netip.Addr) error {
		switch dst {
		case silent:
			<-ctx.Done()
			return ctx.Err()
		case refused:
			return syscall.EHOSTUNREACH
		}
		return nil
	}
	p := newPair(t, pipe.Faults{}, pipe.Faults{}, cfg)
	for _, tc := range []struct {
		dst    netip.Addr
		want   EventType
		status int
	}{
		{p.addrB(), EventAddrResolved, 0},
		{silent, EventAddrError, -int(syscall.ETIMEDOUT)},
		{refused, EventAddrError, -int(syscall.EHOSTUNREACH)},
	} {
		ch := NewEventChannel()
		id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
		if err := id.ResolveAddr(netip.AddrPortFrom(p.addrA(), 0), netip.AddrPortFrom(tc.dst, 7000), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ev := expect(t, ch, tc.want)
		if ev.Status != tc.status {
			t.Errorf("%v: status %d, want %d", tc.dst, ev.Status, tc.status)
		}
		if tc.want == EventAddrError {
			// The ID may try again (perftest resolves up to 10 times).
			if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(tc.dst, 7000), 50*time.Millisecond); err != nil {
				t.Errorf("second resolve: %v", err)
			} else {
				expect(t, ch, EventAddrError)
			}
		}
		id.Destroy()
		ch.Close()
	}
	// Dial reports it as an *EventError.
	_, err := Dial(ctxT(t, 10*time.Second), netip.AddrPortFrom(silent, 7000).String(), &Options{Src: p.addrA()})
	var ee *EventError
	if !errors.As(err, &ee) || ee.Event != EventAddrError || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Errorf("dial: %v", err)
	}
}
