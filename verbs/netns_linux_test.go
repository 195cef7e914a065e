package verbs_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

// openInNS opens a device on a UDP endpoint bound to addr in namespace ns,
// closed when the test ends.
func openInNS(t *testing.T, ns, addr string) *verbs.Device {
	t.Helper()
	var ep *udp.Endpoint
	if err := netnstest.Do(ns, func() (err error) {
		ep, err = udp.Listen(netip.MustParseAddrPort(addr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(ep, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestTwoNamespaces runs RC traffic between two network namespaces joined
// by a veth pair, each device on port 4791 of its own address, as two hosts.
func TestTwoNamespaces(t *testing.T) {
	pair := netnstest.NewPair(t, netnstest.Config{
		Prefix: "sr",
		IPv4:   [2]string{"10.199.0.1/24", "10.199.0.2/24"},
	})
	da, db := openInNS(t, pair.NS[0], "10.199.0.1:4791"), openInNS(t, pair.NS[1], "10.199.0.2:4791")
	if m := da.ActiveMTU(); m != verbs.MTU1024 {
		t.Errorf("active MTU %v on a 1500-byte veth, want 1024 (rxe)", m)
	}
	a, b := connected(t, da, db, verbs.QPTypeRC)
	fill := func(p []byte) {
		for i := range p {
			p[i] = byte(i*7 + i>>8 + i>>16) // not periodic: a shifted copy differs
		}
	}
	fill(a.buf[:100000])
	// The WRITE carries an immediate: its receive completion orders the
	// test's look at b's memory after b's device wrote it (the UDP path
	// gives the race detector no such order).
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.sge(0, 100000)}, {WRID: 2}}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 100000)},
		{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: a.sge(0, 50000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey(), ImmData: 0x600d},
		{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(300000, 50000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
	}); err != nil {
		t.Fatalf("posted %d of 3: %v", n, err)
	}
	for i, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	wc := poll(t, b.cq, 2)
	if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRecv || wc[0].WRID != 1 || wc[0].ByteLen != 100000 {
		t.Fatalf("SEND's receive completion %+v", wc[0])
	}
	if wc[1].Status != verbs.WCSuccess || wc[1].Opcode != verbs.WCRecvRDMAWithImm || wc[1].WRID != 2 || wc[1].ByteLen != 50000 || wc[1].ImmData != 0x600d {
		t.Fatalf("WRITE_WITH_IMM's receive completion %+v", wc[1])
	}
	for _, c := range []struct {
		what      string
		got, want []byte
	}{
		{"SEND", b.buf[:100000], a.buf[:100000]},
		{"WRITE", b.buf[200000:250000], a.buf[:50000]},
		{"READ", a.buf[300000:350000], a.buf[:50000]},
	} {
		if !bytes.Equal(c.got, c.want) {
			i := 0
			for c.got[i] == c.want[i] {
				i++
			}
			t.Fatalf("%s data differs at byte %d", c.what, i)
		}
	}
}

// TestPortFollowsInterface: a device on a veth reports its port DOWN, with
// a port error event, while its interface is down or has lost its carrier
// (the peer end down), and ACTIVE, with a port active event, when it is
// back, as rxe follows its netdev.
func TestPortFollowsInterface(t *testing.T) {
	pair := netnstest.NewPair(t, netnstest.Config{
		Prefix: "srp",
		IPv4:   [2]string{"10.199.1.1/24", "10.199.1.2/24"},
	})
	d := openInNS(t, pair.NS[0], "10.199.1.1:4791")
	// The event of the open itself.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := d.GetAsyncEvent(ctx); err != nil || ev.Type != verbs.EventPortActive {
		t.Fatalf("first event %+v, %v; want port active", ev, err)
	}
	expect := func(what string, typ verbs.EventType, st verbs.PortState, phys uint8) {
		t.Helper()
		ev, err := d.GetAsyncEvent(ctx)
		if err != nil || ev.Type != typ || ev.Port != 1 {
			t.Fatalf("%s: event %+v, %v; want %v on port 1", what, ev, err, typ)
		}
		pa, err := d.QueryPort(1)
		if err != nil || pa.State != st || pa.PhysState != phys {
			t.Fatalf("%s: port %v phys %d (%v); want %v phys %d", what, pa.State, pa.PhysState, err, st, phys)
		}
	}
	// Nothing while the interface stays up.
	select {
	case ev := <-d.AsyncEvents():
		t.Fatalf("event %+v with the interface up", ev)
	case <-time.After(100 * time.Millisecond):
	}
	if pa, _ := d.QueryPort(1); pa.State != verbs.PortActive || pa.ActiveSpeed != 8 || pa.ActiveWidth != 1 {
		t.Fatalf("port %v, speed %d width %d with the interface up; want active, FDR10 (8) 1X (1) as rxe on a 10 Gb/s veth",
			pa.State, pa.ActiveSpeed, pa.ActiveWidth)
	}
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "down")
	expect("interface down", verbs.EventPortErr, verbs.PortDown, 3)
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "up")
	expect("interface up", verbs.EventPortActive, verbs.PortActive, 5)
	netnstest.IP(t, "-n", pair.NS[1], "link", "set", pair.Veth[1], "down")
	expect("carrier lost", verbs.EventPortErr, verbs.PortDown, 3)
	netnstest.IP(t, "-n", pair.NS[1], "link", "set", pair.Veth[1], "up")
	expect("carrier back", verbs.EventPortActive, verbs.PortActive, 5)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Opened on a down interface: DOWN at once, and no port active event
	// until it comes up.
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "down")
	d = openInNS(t, pair.NS[0], "10.199.1.1:4791")
	if pa, _ := d.QueryPort(1); pa.State != verbs.PortDown {
		t.Fatalf("port %v on opening over a down interface", pa.State)
	}
	select {
	case ev := <-d.AsyncEvents():
		t.Fatalf("event %+v on opening over a down interface", ev)
	case <-time.After(100 * time.Millisecond):
	}
	netnstest.IP(t, "-n", pair.NS[0], "link", "set", pair.Veth[0], "up")
	expect("opened down, then up", verbs.EventPortActive, verbs.PortActive, 5)
}
