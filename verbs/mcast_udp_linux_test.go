package verbs

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/softroce/softroce/link/tee"
	"github.com/softroce/softroce/link/udp"
)

// TestMulticastUDP: over real UDP on loopback, two devices' UD QPs attach
// to a group and a third device sends to it: both receive the message; a
// QP attached to another group does not; a detached QP stops receiving
// and its device's link leaves the group, as does one whose last QP is
// destroyed. One receiver's link is wrapped in link/tee (--pcap).
func TestMulticastUDP(t *testing.T) {
	o := pairOpts{typ: QPTypeUD}
	defaults(&o)
	r1ep, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort())
	if err != nil {
		t.Skip("UDP loopback unavailable:", err)
	}
	port := r1ep.LocalAddr().Port()
	r2ep, err := udp.Listen(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port))
	if err != nil {
		r1ep.Close()
		t.Skip("UDP loopback unavailable:", err)
	}
	sep, err := udp.Listen(netip.MustParseAddrPort("127.0.0.4:0"), udp.WithAnyPort())
	if err != nil {
		r1ep.Close()
		r2ep.Close()
		t.Skip("UDP loopback unavailable:", err)
	}
	var teed int
	r1, r2 := newSide(t, r1ep, o), newSide(t, tee.New(r2ep, func(tee.Direction, netip.AddrPort, netip.AddrPort, uint8, []byte) { teed++ }), o)
	s := newSide(t, sep, o)
	for _, x := range []*side{r1, r2, s} {
		connect(t, x, s, o)
	}
	other, err := r2.pd.CreateQP(&QPInitAttr{QPType: QPTypeUD, SendCQ: r2.scq, RecvCQ: r2.scq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, &side{qp: other}, s, o)

	group, group2 := netip.MustParseAddr("239.7.8.1"), netip.MustParseAddr("239.7.8.2")
	for _, x := range []*side{r1, r2} {
		if err := x.qp.AttachMcast(GIDFromAddr(group), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.AttachMcast(GIDFromAddr(group2), 0); err != nil {
		t.Fatal(err)
	}
	if g := r2.dev.Groups(); len(g) != 2 {
		t.Errorf("r2's link joined %v, want 2 groups", g)
	}
	ah, err := s.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, DstPort: port,
		GRH: GlobalRoute{DGID: GIDFromAddr(group), SGIDIndex: 1, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(id uint64, msg string) {
		t.Helper()
		copy(s.buf[id*256:], msg)
		post(t, s.qp, SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, SGList: sge(s, int(id)*256, len(msg)),
			AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 0x11111111})
		if wc := waitWC(t, s.scq, 1, 5*time.Second); wc[0].Status != WCSuccess {
			t.Fatalf("send: %+v", wc[0])
		}
	}
	recvd := func(x *side, off int, msg string) {
		t.Helper()
		wc := waitWC(t, x.rcq, 1, 5*time.Second)[0]
		if wc.Status != WCSuccess || wc.ByteLen != uint32(40+len(msg)) || wc.SrcQP != s.qp.QPN() {
			t.Fatalf("%v: %+v", x.dev.LocalAddr(), wc)
		}
		if got := string(x.buf[off+40 : off+40+len(msg)]); got != msg {
			t.Errorf("%v received %q, want %q", x.dev.LocalAddr(), got, msg)
		}
	}
	postRecv(t, r1, 1, 0, 256)
	postRecv(t, r2, 1, 0, 256)
	if _, err := other.PostRecv([]RecvWR{{WRID: 9, SGList: sge(r2, 4096, 256)}}); err != nil {
		t.Fatal(err)
	}
	send(1, "to the group")
	recvd(r1, 0, "to the group")
	recvd(r2, 0, "to the group")
	if teed == 0 {
		t.Error("the tee reported nothing the group received")
	}

	if err := r2.qp.DetachMcast(GIDFromAddr(group), 0); err != nil {
		t.Fatal(err)
	}
	if g := r2.dev.Groups(); len(g) != 1 || g[0] != group2 {
		t.Errorf("after detach, r2's link is in %v, want [%v]", g, group2)
	}
	postRecv(t, r1, 2, 256, 256)
	postRecv(t, r2, 2, 256, 256)
	send(2, "once more")
	recvd(r1, 256, "once more")
	time.Sleep(50 * time.Millisecond)
	if n := r2.rcq.Len(); n != 0 {
		t.Errorf("a detached QP got %d completions", n)
	}
	if n := r2.scq.Len(); n != 0 {
		t.Errorf("a QP of another group got %d completions", n)
	}
	if err := r1.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if g := r1.dev.Groups(); len(g) != 0 {
		t.Errorf("after its last QP was destroyed, r1's link is in %v", g)
	}
}

// TestMulticastUDPClose: closing a device whose link joined groups ends
// the groups' receive loops; a link on a wildcard address cannot join,
// and the attach fails with EADDRNOTAVAIL, attaching nothing.
func TestMulticastUDPClose(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	o := pairOpts{typ: QPTypeUD}
	defaults(&o)
	func() {
		ep, err := udp.Listen(netip.MustParseAddrPort("127.0.0.2:0"), udp.WithAnyPort())
		if err != nil {
			t.Skip("UDP loopback unavailable:", err)
		}
		s := newSide(t, ep, o)
		connect(t, s, s, o)
		for _, g := range []string{"239.7.8.3", "239.7.8.4"} {
			if err := s.qp.AttachMcast(GIDFromAddr(netip.MustParseAddr(g)), 0); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(s.dev.Groups()); n != 2 {
			t.Fatalf("%d groups joined, want 2", n)
		}
		s.dev.Close()
		if n := len(s.dev.Groups()); n != 0 {
			t.Errorf("%d groups after Close", n)
		}
	}()
	goleak.VerifyNone(t, opt)

	ep, err := udp.Listen(netip.MustParseAddrPort("0.0.0.0:0"), udp.WithAnyPort())
	if err != nil {
		t.Skip("UDP unavailable:", err)
	}
	s := newSide(t, ep, o)
	peer := &side{qp: &QP{qpn: 0x30}, dev: &Device{gids: makeGIDs(netip.MustParseAddr("127.0.0.2"), [6]byte{})}, port: 4791}
	connect(t, s, peer, o)
	g := GIDFromAddr(netip.MustParseAddr("239.7.8.5"))
	if err := s.qp.AttachMcast(g, 0); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("attach over a wildcard link: %v, want EADDRNOTAVAIL", err)
	}
	if err := s.qp.DetachMcast(g, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("detach after a failed attach: %v, want EINVAL (not attached)", err)
	}
}

// TestMulticastBlockSelfLoopback: a UD QP made with
// QPCreateBlockSelfMcastLB sends to a group a QP of its own device and a
// QP of another device (same host, another address) attach to: only the
// other device's QP receives it, and the sender's device counts one
// DropMcastLoopback; a datagram from a QP without the flag reaches both.
// A create flag other than that one fails with EINVAL.
func TestMulticastBlockSelfLoopback(t *testing.T) {
	o := pairOpts{typ: QPTypeUD}
	defaults(&o)
	sep, err := udp.Listen(netip.MustParseAddrPort("127.0.0.5:0"), udp.WithAnyPort())
	if err != nil {
		t.Skip("UDP loopback unavailable:", err)
	}
	port := sep.LocalAddr().Port()
	rep, err := udp.Listen(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.6"), port))
	if err != nil {
		sep.Close()
		t.Skip("UDP loopback unavailable:", err)
	}
	s, r := newSide(t, sep, o), newSide(t, rep, o)
	if _, err := s.pd.CreateQP(&QPInitAttr{QPType: QPTypeUD, SendCQ: s.scq, RecvCQ: s.scq,
		CreateFlags: QPCreateBlockSelfMcastLB << 1}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("create qp with an unknown create flag: %v, want EINVAL", err)
	}
	blocked, err := s.pd.CreateQP(&QPInitAttr{QPType: QPTypeUD, SendCQ: s.scq, RecvCQ: s.scq,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}, CreateFlags: QPCreateBlockSelfMcastLB})
	if err != nil {
		t.Fatal(err)
	}
	bs := &side{dev: s.dev, pd: s.pd, scq: s.scq, rcq: s.scq, qp: blocked, buf: s.buf, mr: s.mr, port: s.port}
	for _, x := range []*side{s, r, bs} {
		connect(t, x, s, o)
	}
	group := netip.MustParseAddr("239.7.8.9")
	for _, x := range []*side{s, r} {
		if err := x.qp.AttachMcast(GIDFromAddr(group), 0); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := s.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, DstPort: port,
		GRH: GlobalRoute{DGID: GIDFromAddr(group), SGIDIndex: 1, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(qp *QP, id uint64, msg string) {
		t.Helper()
		copy(s.buf[8192+id*256:], msg)
		post(t, qp, SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, SGList: sge(s, 8192+int(id)*256, len(msg)),
			AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 0x11111111})
		if wc := waitWC(t, s.scq, 1, 5*time.Second); wc[0].Status != WCSuccess || wc[0].WRID != id {
			t.Fatalf("send: %+v", wc[0])
		}
	}
	recvd := func(x *side, from *QP, off int, msg string) {
		t.Helper()
		wc := waitWC(t, x.rcq, 1, 5*time.Second)[0]
		if wc.Status != WCSuccess || wc.SrcQP != from.QPN() {
			t.Fatalf("%v: %+v", x.dev.LocalAddr(), wc)
		}
		if got := string(x.buf[off+40 : off+40+len(msg)]); got != msg {
			t.Errorf("%v received %q, want %q", x.dev.LocalAddr(), got, msg)
		}
	}
	postRecv(t, s, 1, 0, 256)
	postRecv(t, r, 1, 0, 256)
	send(blocked, 1, "not to myself")
	recvd(r, blocked, 0, "not to myself")
	deadline := time.Now().Add(5 * time.Second)
	for s.dev.Stats().DropMcastLoopback.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.dev.Stats().DropMcastLoopback.Load(); n != 1 {
		t.Errorf("DropMcastLoopback = %d, want 1", n)
	}
	if n := s.rcq.Len(); n != 0 {
		t.Fatalf("a QP of the sender's device received the blocked datagram (%d completions)", n)
	}
	// The receive WR posted above is still there: a plain sender's
	// datagram takes it.
	postRecv(t, r, 2, 256, 256)
	send(s.qp, 2, "to all")
	recvd(s, s.qp, 0, "to all")
	recvd(r, s.qp, 256, "to all")
}
