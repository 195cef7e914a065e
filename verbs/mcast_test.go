package verbs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// TestMulticast: a datagram to QPN 0xFFFFFF and a group address reaches
// every UD QP attached to the group, and only those (docs/protocol.md §6.3).
func TestMulticast(t *testing.T) {
	o := pairOpts{typ: QPTypeUD}
	defaults(&o)
	ea, _ := newPipePair(t, &o)
	s := newSide(t, ea, o)
	peer := &side{qp: &QP{qpn: 0x30}, dev: &Device{gids: makeGIDs(netip.MustParseAddr("10.0.0.2"), [6]byte{})}, port: 4791}
	connect(t, s, peer, o)
	// A second UD QP on the same device, same Q_Key.
	qp2, err := s.pd.CreateQP(&QPInitAttr{QPType: QPTypeUD, SendCQ: s.scq, RecvCQ: s.rcq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, &side{qp: qp2}, peer, o)
	group := GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
	if err := s.qp.AttachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	if err := qp2.AttachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	if err := qp2.AttachMcast(GIDFromAddr(netip.MustParseAddr("10.1.1.1")), 0); err == nil {
		t.Fatal("attached to a unicast GID")
	}
	postRecv(t, s, 1, 0, 100)
	if _, err := qp2.PostRecv([]RecvWR{{WRID: 2, SGList: sge(s, 100, 100)}}); err != nil {
		t.Fatal(err)
	}
	h := wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, DestQP: MulticastQPN, PKey: 0xFFFF},
		DETH: wire.DETH{QKey: 0x11111111, SrcQP: 0x30}, Payload: []byte("to the group")}
	b := h.Append(nil)
	lp := link.Packet{Buf: b, N: len(b), Src: netip.MustParseAddrPort("10.0.0.2:4791"), Dst: netip.MustParseAddrPort("239.1.2.3:4791")}
	wire.FillICRC(b, lp.Src, lp.Dst, 0)
	var p wire.Packet
	s.dev.input(&lp, &p)
	wc := waitWC(t, s.rcq, 2, 5*time.Second)
	if wc[0].WRID+wc[1].WRID != 3 || wc[0].ByteLen != 52 || wc[1].ByteLen != 52 {
		t.Fatalf("%+v", wc)
	}
	if err := qp2.DetachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	postRecv(t, s, 3, 0, 100)
	qp2.PostRecv([]RecvWR{{WRID: 4, SGList: sge(s, 100, 100)}})
	lp.Buf, lp.N = b, len(b)
	s.dev.input(&lp, &p)
	wc = waitWC(t, s.rcq, 1, 5*time.Second)
	time.Sleep(5 * time.Millisecond)
	if wc[0].WRID != 3 || s.rcq.Len() != 0 {
		t.Fatalf("after detach: %+v, %d more", wc, s.rcq.Len())
	}
}
