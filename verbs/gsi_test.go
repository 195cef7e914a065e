package verbs

import (
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
)

// TestGSIQP checks the hook the connection manager uses: a UD QP with QPN 1
// that sends and accepts only Q_Key 0x80010000 (docs/protocol.md §6.1, §8.1).
func TestGSIQP(t *testing.T) {
	o := pairOpts{typ: QPTypeUD}
	defaults(&o)
	ea, eb := newPipePair(t, &o)
	a, b := newSide(t, ea, o), newSide(t, eb, o)
	var gsi [2]*QP
	for i, s := range []*side{a, b} {
		qp, err := s.pd.CreateGSIQP(&QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
		if err != nil {
			t.Fatal(err)
		}
		if qp.QPN() != 1 {
			t.Fatalf("GSI QPN %d", qp.QPN())
		}
		if _, err := s.pd.CreateGSIQP(&QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq}); err == nil {
			t.Fatal("second GSI QP created")
		}
		if err := qp.Modify(&QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 0x1234}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey); err == nil {
			t.Fatal("GSI Q_Key changed")
		}
		for _, a := range []QPAttr{{QPState: QPStateInit, PortNum: 1, QKey: wire.GSIQKey}, {QPState: QPStateRTR}, {QPState: QPStateRTS}} {
			m := QPAttrState
			switch a.QPState {
			case QPStateInit:
				m |= QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
			case QPStateRTS:
				m |= QPAttrSQPSN
			}
			if err := qp.Modify(&a, m); err != nil {
				t.Fatal(err)
			}
		}
		gsi[i] = qp
	}
	if _, err := gsi[1].PostRecv([]RecvWR{{WRID: 1, SGList: sge(b, 0, 40+256)}}); err != nil {
		t.Fatal(err)
	}
	ah, _ := a.pd.CreateAH(&AHAttr{IsGlobal: true, PortNum: 1, DstPort: b.port, GRH: GlobalRoute{DGID: b.dev.gids[1], SGIDIndex: 1}})
	post(t, gsi[0], SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a, 0, 256), AH: ah, RemoteQPN: 1, RemoteQKey: wire.GSIQKey})
	wc := waitWC(t, b.rcq, 1, 5*time.Second)
	if wc[0].Status != WCSuccess || wc[0].SrcQP != 1 || wc[0].ByteLen != 296 || wc[0].QPNum != 1 {
		t.Fatalf("%+v", wc[0])
	}
}
