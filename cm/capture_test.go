package cm

import (
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/cm/mad"
	"github.com/softroce/softroce/wire"
)

// captured is one CM MAD (or data packet) from a capture of kernel rxe
// (see capturePath and testdata/README.md).
type captured struct {
	src, dst netip.Addr
	sport    uint16
	pkt      wire.Packet
}

// reducedCaptures are the captures cut down to a subset of their frames
// (see testdata/README.md), kept in testdata; the others are read unchanged
// from the repository's testdata/captures.
var reducedCaptures = map[string]bool{"write_bw_rdmacm.pcap": true}

// capturePath returns the file of the capture called name.
func capturePath(name string) string {
	if reducedCaptures[name] {
		return filepath.Join("testdata", name)
	}
	return filepath.Join("..", "testdata", "captures", name)
}

func readCapture(t testing.TB, name string) []captured {
	t.Helper()
	f, err := os.Open(capturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := capture.ReadAll(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []captured
	for _, p := range pkts {
		if !p.Src.Addr().Is4() {
			continue
		}
		c := captured{src: p.Src.Addr(), dst: p.Dst.Addr(), sport: p.Src.Port()}
		if err := c.pkt.Parse(p.Payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestCaptureFlowLabel checks rdma_cm's flow label rule and the UDP source
// port it gives the RC QPs against the kernel's REQs.
func TestCaptureFlowLabel(t *testing.T) {
	for _, name := range []string{"rping.pcap", "ucmatose.pcap", "write_bw_rdmacm.pcap"} {
		frames := readCapture(t, name)
		for _, f := range frames {
			if f.pkt.BTH.DestQP != 1 {
				continue
			}
			var req mad.REQ
			if req.Parse(f.pkt.Payload) != nil {
				continue
			}
			hdr, _, err := mad.ParseCMAHeader(req.PrivateData)
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := mad.ParseServiceID(req.ServiceID)
			if fl := flowLabel(hdr.SrcPort, port); fl != req.Primary.FlowLabel {
				t.Errorf("%s: flow label %#x, rule gives %#x (ports %d -> %d)", name, req.Primary.FlowLabel, fl, hdr.SrcPort, port)
			}
		}
	}
}

// capturedRping returns the kernel's REQ and REP of rping.pcap and the UDP
// source port of the RC data packets.
func capturedRping(t *testing.T) (*mad.REQ, *mad.REP, uint16) {
	var req mad.REQ
	var rep mad.REP
	var sport uint16
	for _, f := range readCapture(t, "rping.pcap") {
		if f.pkt.BTH.DestQP != 1 {
			if sport == 0 {
				sport = f.sport
			}
			continue
		}
		h, _ := mad.ParseHeader(f.pkt.Payload)
		switch h.AttrID {
		case mad.AttrREQ:
			req.Parse(append([]byte(nil), f.pkt.Payload...))
		case mad.AttrREP:
			rep.Parse(append([]byte(nil), f.pkt.Payload...))
		}
	}
	return &req, &rep, sport
}

// capturePair is a pipe pair with the captures' addresses and MACs (so the
// node GUIDs match too), Linux's default CM timing, and a recorder of the
// MADs each side sends.
func capturePair(t *testing.T) (*pair, func() []mad.Message, func() []mad.Message) {
	var mu sync.Mutex
	var fromA, fromB [][]byte
	rec := func(into *[][]byte) pipe.Filter {
		return func(p *link.Packet) pipe.Verdict {
			var w wire.Packet
			if w.Parse(p.Bytes()) == nil && w.BTH.DestQP == 1 {
				mu.Lock()
				*into = append(*into, append([]byte(nil), w.Payload...))
				mu.Unlock()
			}
			return pipe.Pass
		}
	}
	ca := pipe.Config{Addr: netip.MustParseAddrPort("10.77.0.12:4791"), Filter: rec(&fromA)}
	cb := pipe.Config{Addr: netip.MustParseAddrPort("10.77.0.11:4791"), Filter: rec(&fromB)}
	p := newPairWith(t, ca, cb, verbs.Config{Name: "vm2", MAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 0x12}},
		verbs.Config{Name: "vm1", MAC: [6]byte{0x52, 0x54, 0, 0x77, 0, 0x11}}, &Config{})
	get := func(l *[][]byte) func() []mad.Message {
		return func() []mad.Message {
			mu.Lock()
			defer mu.Unlock()
			var out []mad.Message
			for _, b := range *l {
				m, err := mad.ParseMessage(b)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, m)
			}
			return out
		}
	}
	return p, get(&fromA), get(&fromB)
}

// TestCaptureActive: softroce's REQ for rping's parameters equals the
// kernel's, but for the per-connection random values.
func TestCaptureActive(t *testing.T) {
	kreq, _, sport := capturedRping(t)
	khdr, _, _ := mad.ParseCMAHeader(kreq.PrivateData)
	p, sentA, _ := capturePair(t)
	l, err := Listen("10.77.0.11:7174", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, mad.PortSpaceTCP)
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(p.addrA(), khdr.SrcPort)); err != nil {
		t.Fatal(err)
	}
	id.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("10.77.0.11:7174"), 0)
	expect(t, ch, EventAddrResolved)
	id.ResolveRoute(0)
	expect(t, ch, EventRouteResolved)
	qp := rcQP(t, id)
	// rping's rdma_conn_param.
	if err := id.Connect(&ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, EventEstablished)
	got, ok := sentA()[0].(*mad.REQ)
	if !ok {
		t.Fatalf("first MAD %T", sentA()[0])
	}
	want := *kreq
	want.TID, want.LocalCommID, want.LocalQPN, want.StartingPSN = got.TID, got.LocalCommID, qp.QPN(), got.StartingPSN
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("REQ differs from the kernel's (-kernel +softroce):\n%s", diff)
	}
	if s := verbs.UDPSport(got.Primary.FlowLabel, 0, 0); s != sport {
		t.Errorf("RC UDP source port %d, kernel %d", s, sport)
	}
}

// TestCapturePassive replays the kernel client's REQ into a softroce
// listener: the REP must equal the kernel server's, but for the random values.
func TestCapturePassive(t *testing.T) {
	kreq, krep, _ := capturedRping(t)
	p, _, sentB := capturePair(t)
	l, err := Listen("10.77.0.11:7174", &Options{Param: &ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, _ := kreq.Append(nil)
	p.ab.input(p.addrA(), b)
	waitFor(t, 5*time.Second, "REP", func() bool { return len(sentB()) > 0 })
	got, ok := sentB()[0].(*mad.REP)
	if !ok {
		t.Fatalf("answer %T", sentB()[0])
	}
	want := *krep
	want.LocalCommID, want.LocalQPN, want.StartingPSN = got.LocalCommID, got.LocalQPN, got.StartingPSN
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("REP differs from the kernel's (-kernel +softroce):\n%s", diff)
	}
	// The duplicate REQ (the kernel retransmitting) gets the same REP.
	p.ab.input(p.addrA(), b)
	waitFor(t, 5*time.Second, "second REP", func() bool { return len(sentB()) > 1 })
	if diff := cmp.Diff(sentB()[0], sentB()[1]); diff != "" {
		t.Errorf("duplicate answered differently:\n%s", diff)
	}
}

// capturedSIDR returns the kernel's SIDR_REQ and SIDR_REP of udaddy.pcap.
func capturedSIDR(t *testing.T) (*mad.SIDRREQ, *mad.SIDRREP) {
	var req mad.SIDRREQ
	var rep mad.SIDRREP
	for _, f := range readCapture(t, "udaddy.pcap") {
		if f.pkt.BTH.DestQP != 1 {
			continue
		}
		h, _ := mad.ParseHeader(f.pkt.Payload)
		switch h.AttrID {
		case mad.AttrSIDRREQ:
			req.Parse(append([]byte(nil), f.pkt.Payload...))
		case mad.AttrSIDRREP:
			rep.Parse(append([]byte(nil), f.pkt.Payload...))
		}
	}
	if req.ServiceID == 0 || rep.ServiceID == 0 {
		t.Fatal("udaddy.pcap: no SIDR exchange")
	}
	return &req, &rep
}

// TestCaptureSIDR compares softroce's SIDR_REQ (active) and SIDR_REP
// (passive) with the kernel's in udaddy.pcap.
func TestCaptureSIDR(t *testing.T) {
	kreq, krep := capturedSIDR(t)
	khdr, _, err := mad.ParseCMAHeader(kreq.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	ps, port, _ := mad.ParseServiceID(kreq.ServiceID)
	if ps != mad.PortSpaceUDP {
		t.Fatalf("udaddy port space %v", ps)
	}
	p, sentA, sentB := capturePair(t)
	l, err := Listen(netip.AddrPortFrom(p.addrB(), port).String(), &Options{PortSpace: mad.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// Active: the same source port gives the same cma_hdr.
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, mad.PortSpaceUDP)
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(p.addrA(), khdr.SrcPort)); err != nil {
		t.Fatal(err)
	}
	id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.addrB(), port), 0)
	expect(t, ch, EventAddrResolved)
	if err := id.Connect(&ConnParam{QPNum: 0x23}); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, ch, EventEstablished)
	if ev.UD == nil || ev.UD.QKey != mad.UDPQKey {
		t.Fatalf("UD param %+v", ev.UD)
	}
	got, ok := sentA()[0].(*mad.SIDRREQ)
	if !ok {
		t.Fatalf("first MAD %T", sentA()[0])
	}
	want := *kreq
	want.TID, want.RequestID = got.TID, got.RequestID
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("SIDR_REQ differs from the kernel's (-kernel +softroce):\n%s", diff)
	}

	// Passive: the kernel's SIDR_REQ gets softroce's SIDR_REP.
	n := len(sentB())
	b, _ := kreq.Append(nil)
	p.ab.input(p.addrA(), b)
	waitFor(t, 5*time.Second, "SIDR_REP", func() bool { return len(sentB()) > n })
	rep, ok := sentB()[n].(*mad.SIDRREP)
	if !ok {
		t.Fatalf("answer %T", sentB()[n])
	}
	wantRep := *krep
	wantRep.QPN = rep.QPN
	if diff := cmp.Diff(&wantRep, rep); diff != "" {
		t.Errorf("SIDR_REP differs from the kernel's (-kernel +softroce):\n%s", diff)
	}
}
