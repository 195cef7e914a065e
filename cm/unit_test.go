package cm

import (
	"net/netip"
	"testing"
	"time"
)

func TestCommonPrefix(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		n    int
	}{
		{"10.0.0.1", "10.0.0.1", 128},
		{"10.0.0.1", "10.0.0.2", 96 + 30},
		{"10.0.0.1", "11.0.0.1", 96 + 7},
		{"2001:db8::1", "2001:db8::2", 126},
	} {
		if n := commonPrefix(netip.MustParseAddr(tc.a), netip.MustParseAddr(tc.b)); n != tc.n {
			t.Errorf("commonPrefix(%s, %s) = %d, want %d", tc.a, tc.b, n, tc.n)
		}
	}
}

func TestTimeoutEncoding(t *testing.T) {
	for e := uint8(0); e < 32; e++ {
		if got := durationExp(expDuration(e)); got != e {
			t.Errorf("durationExp(expDuration(%d)) = %d", e, got)
		}
	}
	if d := expDuration(20); d < 4290*time.Millisecond || d > 4300*time.Millisecond {
		t.Errorf("4.096 us << 20 = %v, want ~4.3 s", d)
	}
	if durationExp(40*time.Millisecond) != 14 { // 4.096 us << 14 = 67 ms >= 40 ms
		t.Errorf("durationExp(40ms) = %d", durationExp(40*time.Millisecond))
	}
}

func TestGRHSource(t *testing.T) {
	var g4 [40]byte
	g4[20] = 0x45
	copy(g4[32:36], []byte{10, 1, 2, 3})
	if a := grhSource(g4[:]); a != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("IPv4 GRH area: %v", a)
	}
	var g6 [40]byte
	g6[0] = 0x60
	src := netip.MustParseAddr("2001:db8::7").As16()
	copy(g6[8:24], src[:])
	if a := grhSource(g6[:]); a != netip.MustParseAddr("2001:db8::7") {
		t.Errorf("IPv6 GRH: %v", a)
	}
}

// TestEventChannelLevel: SetLevel's function reports the edges of "events
// wait" (queued on an empty channel; the last one taken by TryGet, Get or
// Close), Relevel reports whether events wait now, and TryGet takes in
// order without waiting.
func TestEventChannelLevel(t *testing.T) {
	c := NewEventChannel()
	var edges []bool
	c.SetLevel(func(on bool) { edges = append(edges, on) })
	if _, ok := c.TryGet(); ok {
		t.Fatal("TryGet on an empty channel returned an event")
	}
	c.post(&Event{Type: EventAddrResolved})
	c.post(&Event{Type: EventRouteResolved})
	if ev, ok := c.TryGet(); !ok || ev.Type != EventAddrResolved {
		t.Fatalf("TryGet = %v, %v; want ADDR_RESOLVED", ev, ok)
	}
	if ev, err := c.Get(t.Context()); err != nil || ev.Type != EventRouteResolved {
		t.Fatalf("Get = %v, %v; want ROUTE_RESOLVED", ev, err)
	}
	c.post(&Event{Type: EventEstablished})
	c.Close()
	c.Close()
	// Relevel reports what is, whatever was reported before.
	c.Relevel()
	c = NewEventChannel()
	c.SetLevel(func(on bool) { edges = append(edges, on) })
	c.post(&Event{Type: EventAddrResolved})
	c.post(&Event{Type: EventRouteResolved})
	c.Relevel()
	c.TryGet()
	c.Relevel()
	c.TryGet()
	c.Relevel()
	want := []bool{true, false, true, false, false, true, true, true, false, false}
	if len(edges) != len(want) {
		t.Fatalf("edges %v, want %v", edges, want)
	}
	for i := range want {
		if edges[i] != want[i] {
			t.Fatalf("edges %v, want %v", edges, want)
		}
	}
}
