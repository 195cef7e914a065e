package tee

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

type seen struct {
	Dir      Direction
	Src, Dst netip.AddrPort
	Data     string
}

func newPair(t *testing.T) (*pipe.Endpoint, *pipe.Endpoint) {
	t.Helper()
	a, b, err := pipe.New(pipe.Config{}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestTeeReportsBothDirections(t *testing.T) {
	a, b := newPair(t)
	var mu sync.Mutex
	var got []seen
	rec := func(dir Direction, src, dst netip.AddrPort, _ uint8, p []byte) {
		mu.Lock()
		// The last 4 bytes are the ICRC the link computed: keep the rest.
		got = append(got, seen{dir, src, dst, string(p[:len(p)-4])})
		mu.Unlock()
	}
	ta, tb := New(a, rec), New(b, rec)
	srcPort := netip.AddrPortFrom(a.LocalAddr().Addr(), 0xC123)
	out := []link.Packet{
		{Buf: []byte("hello-icrc"), N: 10, Dst: b.LocalAddr()},
		{Buf: []byte("world-icrc"), N: 10, Dst: b.LocalAddr(), Src: srcPort},
	}
	if n, err := ta.WriteBatch(out); n != 2 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := make([]link.Packet, 4)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	total := 0
	deadline := time.Now().Add(5 * time.Second)
	for total < 2 && time.Now().Before(deadline) {
		n, err := tb.ReadBatch(in[total:])
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("got %d reports, want 4: %+v", len(got), got)
	}
	// The pipe sends from its own address whatever Src says, and the tee
	// reports what the wire carried.
	want := []seen{
		{Out, a.LocalAddr(), b.LocalAddr(), "hello-"},
		{Out, a.LocalAddr(), b.LocalAddr(), "world-"},
	}
	if d := cmp.Diff(want, got[:2], cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y })); d != "" {
		t.Errorf("writes (-want +got):\n%s", d)
	}
	for _, s := range got[2:] {
		if s.Dir != In || s.Dst != b.LocalAddr() || s.Src != a.LocalAddr() {
			t.Errorf("read report %+v: want In from %v to %v", s, a.LocalAddr().Addr(), b.LocalAddr())
		}
	}
	if ta.Stats().Out.Load() != 2 || tb.Stats().In.Load() != 2 {
		t.Errorf("stats out=%d in=%d, want 2 and 2", ta.Stats().Out.Load(), tb.Stats().In.Load())
	}
}

func TestTeeSetFuncNil(t *testing.T) {
	a, b := newPair(t)
	calls := 0
	ta := New(a, func(Direction, netip.AddrPort, netip.AddrPort, uint8, []byte) { calls++ })
	ta.SetFunc(nil)
	pk := []link.Packet{{Buf: []byte("xxxxxxxx"), N: 8, Dst: b.LocalAddr()}}
	if _, err := ta.WriteBatch(pk); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("callback ran %d times after SetFunc(nil)", calls)
	}
	if ta.LocalAddr() != a.LocalAddr() || ta.MTU() != a.MTU() || ta.BatchSize() != a.BatchSize() || ta.Inner() != a {
		t.Fatal("tee does not forward LocalAddr/MTU/BatchSize/Inner")
	}
}

// nullEP is an endpoint that moves nothing, to measure the wrapper alone.
type nullEP struct{}

func (nullEP) ReadBatch(p []link.Packet) (int, error) {
	p[0].N = 8
	return 1, nil
}
func (nullEP) WriteBatch(p []link.Packet) (int, error) { return len(p), nil }
func (nullEP) LocalAddr() netip.AddrPort               { return netip.MustParseAddrPort("127.0.0.1:4791") }
func (nullEP) MTU() int                                { return 1500 }
func (nullEP) BatchSize() int                          { return 8 }
func (nullEP) Close() error                            { return nil }

func TestTeeZeroAlloc(t *testing.T) {
	pk := []link.Packet{{Buf: make([]byte, 64), N: 8, Dst: netip.MustParseAddrPort("127.0.0.2:4791")},
		{Buf: make([]byte, 64), N: 8, Data: make([]byte, 1024), DataAt: 4, Dst: netip.MustParseAddrPort("127.0.0.2:4791")}}
	var sink int
	for _, fn := range []Func{nil, func(_ Direction, _, _ netip.AddrPort, _ uint8, p []byte) { sink += len(p) }} {
		e := New(capsEP{}, fn)
		e.WriteBatch(pk) // sizes the buffer gathered datagrams are put together in
		allocs := testing.AllocsPerRun(200, func() {
			e.WriteBatch(pk)
			e.ReadBatch(pk)
		})
		if allocs != 0 {
			t.Errorf("callback set=%v: %v allocations per batch, want 0", fn != nil, allocs)
		}
	}
	_ = sink
}

func TestDirectionString(t *testing.T) {
	if In.String() != "in" || Out.String() != "out" {
		t.Fatal(In.String(), Out.String())
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	a, _ := newPair(t)
	e := New(a, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		pk := []link.Packet{{Buf: make([]byte, 2048)}}
		_, err := e.ReadBatch(pk)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	e.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after close returned no error")
		}
	case <-ctx.Done():
		t.Fatal("ReadBatch still blocked after Close")
	}
}

func BenchmarkTeeWrite(b *testing.B) {
	pk := []link.Packet{{Buf: make([]byte, 64), N: 8}}
	e := New(nullEP{}, func(Direction, netip.AddrPort, netip.AddrPort, uint8, []byte) {})
	b.ReportAllocs()
	for b.Loop() {
		e.WriteBatch(pk)
	}
}

// sendAddrEP is a nullEP that sends from a port of its own
// (link.Capabilities.SendAddr), as link/udp does.
type sendAddrEP struct{ nullEP }

func (sendAddrEP) Capabilities() link.Capabilities {
	return link.Capabilities{SendAddr: netip.MustParseAddrPort("127.0.0.1:40000")}
}

// TestTeeSendAddr: the tee passes SendAddr on, and reports a sent datagram
// without a source as coming from it, not from LocalAddr.
func TestTeeSendAddr(t *testing.T) {
	var got netip.AddrPort
	e := New(sendAddrEP{}, func(d Direction, src, _ netip.AddrPort, _ uint8, _ []byte) {
		if d == Out {
			got = src
		}
	})
	want := sendAddrEP{}.Capabilities().SendAddr
	if got := link.CapabilitiesOf(e).SendAddr; got != want {
		t.Errorf("SendAddr = %v, want %v", got, want)
	}
	if got := link.CapabilitiesOf(New(nullEP{}, nil)).SendAddr; got != (nullEP{}).LocalAddr() {
		t.Errorf("without a send address inside, SendAddr = %v, want LocalAddr %v", got, nullEP{}.LocalAddr())
	}
	e.WriteBatch([]link.Packet{{Buf: make([]byte, 8), N: 8, Dst: netip.MustParseAddrPort("127.0.0.2:4791")}})
	if got != want {
		t.Errorf("sent datagram reported from %v, want %v", got, want)
	}
}

// reportEP is an inner endpoint that sends from a port of each packet's
// own (link.Capabilities.ReportsSource), on a wildcard send address.
type reportEP struct{ nullEP }

func (reportEP) WriteBatch(p []link.Packet) (int, error) {
	for i := range p {
		p[i].Src = netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(0xC000+i))
	}
	return len(p), nil
}
func (reportEP) Capabilities() link.Capabilities {
	return link.Capabilities{SendAddr: netip.MustParseAddrPort("0.0.0.0:40000"), ReportsSource: true}
}

// TestTeeReportsSource: behind a link that reports sources the tee reports each
// datagram from the Src the link set; behind any other link, from the
// link's send address (with Src's IP address when that one is a wildcard),
// whatever Src the engine asked for.
func TestTeeReportsSource(t *testing.T) {
	var got []netip.AddrPort
	rec := func(d Direction, src, _ netip.AddrPort, _ uint8, _ []byte) { got = append(got, src) }
	dst := netip.MustParseAddrPort("192.0.2.2:4791")
	asked := netip.MustParseAddrPort("192.0.2.1:49443")
	batch := func() []link.Packet {
		return []link.Packet{{Buf: make([]byte, 8), N: 8, Dst: dst, Src: asked}, {Buf: make([]byte, 8), N: 8, Dst: dst, Src: asked}}
	}
	for _, c := range []struct {
		name    string
		ep      link.Endpoint
		reports bool
		want    []netip.AddrPort
	}{
		{"reporter", reportEP{}, true, []netip.AddrPort{
			netip.MustParseAddrPort("192.0.2.1:49152"), netip.MustParseAddrPort("192.0.2.1:49153")}},
		{"wildcard send address", wildcardEP{}, false, []netip.AddrPort{
			netip.MustParseAddrPort("192.0.2.1:40000"), netip.MustParseAddrPort("192.0.2.1:40000")}},
		{"plain", nullEP{}, false, []netip.AddrPort{nullEP{}.LocalAddr(), nullEP{}.LocalAddr()}},
	} {
		got = nil
		e := New(c.ep, rec)
		if got := link.CapabilitiesOf(e).ReportsSource; got != c.reports {
			t.Errorf("%s: ReportsSource = %v, want %v", c.name, got, c.reports)
		}
		e.WriteBatch(batch())
		if d := cmp.Diff(c.want, got, cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y })); d != "" {
			t.Errorf("%s: reported sources (-want +got):\n%s", c.name, d)
		}
	}
}

// wildcardEP sends from a wildcard address and does not report sources.
type wildcardEP struct{ nullEP }

func (wildcardEP) Capabilities() link.Capabilities {
	return link.Capabilities{SendAddr: netip.MustParseAddrPort("0.0.0.0:40000")}
}

// capsEP is a nullEP with every capability.
type capsEP struct{ nullEP }

func (capsEP) Capabilities() link.Capabilities {
	return link.Capabilities{ReceiveBuffer: 1 << 20, GatherWrite: true,
		SendAddr: netip.MustParseAddrPort("127.0.0.1:40000"), ReportsSource: true}
}

// TestTeeCapabilities: the tee has its inner endpoint's capabilities, all
// of them, so that a device behind it runs as it would without it.
func TestTeeCapabilities(t *testing.T) {
	for _, inner := range []link.Endpoint{nullEP{}, capsEP{}, sendAddrEP{}, reportEP{}} {
		if got, want := link.CapabilitiesOf(New(inner, nil)), link.CapabilitiesOf(inner); got != want {
			t.Errorf("behind a tee %+v, without %+v", got, want)
		}
	}
	// Two tees deep.
	if got, want := link.CapabilitiesOf(New(New(capsEP{}, nil), nil)), link.CapabilitiesOf(capsEP{}); got != want {
		t.Errorf("behind two tees %+v, without %+v", got, want)
	}
}

// TestTeeGathered: behind a link that gathers, a datagram sent with its
// payload in place (link.Packet.Data) is reported whole, headers, payload,
// pad and ICRC, as the peer receives it.
func TestTeeGathered(t *testing.T) {
	a, b, err := pipe.New(pipe.Config{GatherWrite: true}, pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	var got [][]byte
	e := New(a, func(d Direction, _, _ netip.AddrPort, _ uint8, p []byte) {
		if d == Out {
			got = append(got, append([]byte(nil), p...))
		}
	})
	if !link.CapabilitiesOf(e).GatherWrite {
		t.Fatal("the tee does not gather behind a pipe that does")
	}
	pk := []link.Packet{
		{Buf: []byte("HEADERSxx...."), N: 13, Data: []byte("payload"), DataAt: 7, Dst: b.LocalAddr()},
		{Buf: []byte("plain-icrc"), N: 10, Dst: b.LocalAddr()},
	}
	if n, err := e.WriteBatch(pk); n != 2 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := []link.Packet{{Buf: make([]byte, 2048)}, {Buf: make([]byte, 2048)}}
	if n, err := b.ReadBatch(in); n != 2 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if len(got) != 2 {
		t.Fatalf("%d datagrams reported, want 2", len(got))
	}
	for i := range 2 {
		if string(got[i]) != string(in[i].Bytes()) {
			t.Errorf("datagram %d reported as %q, the peer received %q", i, got[i], in[i].Bytes())
		}
	}
	if s := string(got[0][:len(got[0])-4]); s != "HEADERSpayloadxx" {
		t.Errorf("gathered datagram reported as %q, want HEADERSpayloadxx and the ICRC", s)
	}
}

// joinEP is an endpoint that joins groups: its group endpoint is the
// second end of a pipe.
type joinEP struct {
	*pipe.Endpoint
	group link.Endpoint
}

func (j joinEP) JoinGroup(netip.Addr) (link.Endpoint, error) { return j.group, nil }

// TestTeeJoinGroup: the tee passes JoinGroup on and reports what the
// group endpoint receives; over a link that cannot join it says so.
func TestTeeJoinGroup(t *testing.T) {
	a, b := newPair(t)
	inner, _ := newPair(t)
	var got []seen
	e := New(joinEP{inner, b}, func(dir Direction, src, dst netip.AddrPort, _ uint8, p []byte) {
		got = append(got, seen{dir, src, dst, string(p)})
	})
	g, err := e.JoinGroup(netip.MustParseAddr("239.1.1.1"))
	if err != nil {
		t.Fatal(err)
	}
	pkts := []link.Packet{{Buf: []byte("to the group...."), N: 16, Dst: b.LocalAddr()}} // and an ICRC
	if _, err := a.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
	in := []link.Packet{{Buf: make([]byte, 64)}}
	if n, err := g.ReadBatch(in); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if len(got) != 1 || got[0].Dir != In || got[0].Data[:12] != "to the group" {
		t.Errorf("reported %+v", got)
	}
	if _, err := New(a, nil).JoinGroup(netip.MustParseAddr("239.1.1.1")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("JoinGroup over a pipe: %v, want errors.ErrUnsupported", err)
	}
}

// laneEP stands for link/udp's same-host lanes: it sends without filling
// in the ICRC and marks what it sent Local, and reads Local datagrams
// whose ICRC is 0.
type laneEP struct {
	reportEP
	in []byte
}

func (l laneEP) WriteBatch(p []link.Packet) (int, error) {
	for i := range p {
		p[i].Local = true
	}
	return len(p), nil
}

func (l laneEP) ReadBatch(p []link.Packet) (int, error) {
	p[0].N = copy(p[0].Buf, l.in)
	p[0].Src, p[0].Dst, p[0].Local = netip.MustParseAddrPort("192.0.2.2:49152"), netip.MustParseAddrPort("192.0.2.1:4791"), true
	return 1, nil
}

// TestTeeLocalICRC: a datagram that went through a same-host lane
// (Packet.Local: no ICRC computed) is reported with its ICRC filled in,
// both ways, as the wire would carry it; the packet itself is not changed.
// Anything else is reported as it is.
func TestTeeLocalICRC(t *testing.T) {
	dgram := func() []byte {
		var h wire.Packet
		h.BTH = wire.BTH{Opcode: wire.RCSendOnly, DestQP: 0x11, PSN: 7, PKey: wire.DefaultPKey}
		b := h.AppendHeaders(nil)
		return append(append(b, make([]byte, 64)...), 0, 0, 0, 0) // payload, ICRC 0
	}
	var bad []string
	reports := 0
	rec := func(d Direction, src, dst netip.AddrPort, _ uint8, b []byte) {
		reports++
		if _, ok := wire.VerifyICRCAddrs(src, dst, b); !ok {
			bad = append(bad, d.String())
		}
	}
	e := New(laneEP{in: dgram()}, rec)
	out := dgram()
	pk := []link.Packet{{Buf: out, N: len(out), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}}
	e.WriteBatch(pk)
	rd := []link.Packet{{Buf: make([]byte, 256)}}
	e.ReadBatch(rd)
	if reports != 2 || len(bad) != 0 {
		t.Errorf("%d reports, ICRC wrong in %v; want 2 reports with the ICRC filled in", reports, bad)
	}
	if wire.GetICRC(out) != 0 || wire.GetICRC(rd[0].Bytes()) != 0 {
		t.Errorf("the tee changed the packets' own bytes")
	}

	// Not Local: reported as the link had it (here an ICRC of 0).
	bad, reports = nil, 0
	e = New(nullEP{}, rec)
	pk[0].Local = false
	e.WriteBatch(pk)
	if reports != 1 || len(bad) != 1 {
		t.Errorf("a datagram not from a lane: %d reports, %d with a wrong ICRC; want it reported as it is", reports, len(bad))
	}
}

type pendingEP struct {
	link.Endpoint
	n int
}

func (e *pendingEP) Pending() bool { e.n++; return e.n == 1 }

// TestTeePending: Pending asks the inner endpoint (link.Pender), false
// for one that cannot tell.
func TestTeePending(t *testing.T) {
	a, _ := newPair(t)
	in := &pendingEP{Endpoint: a}
	e := New(in, nil)
	var _ link.Pender = e
	if !e.Pending() || e.Pending() || in.n != 2 {
		t.Errorf("Pending did not ask the inner endpoint (%d calls)", in.n)
	}
	if New(a, nil).Pending() {
		t.Error("Pending true over an endpoint that cannot tell")
	}
}
