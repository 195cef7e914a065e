package verbs_test

import (
	"fmt"
	"time"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// Two devices joined by an in-memory link, one RC QP each, one SEND.
func Example() {
	devA, devB, err := verbs.OpenPipe(pipe.Config{}, pipe.Config{})
	if err != nil {
		panic(err)
	}
	defer devA.Close()
	defer devB.Close()
	type side struct {
		pd  *verbs.PD
		cq  *verbs.CQ
		qp  *verbs.QP
		buf []byte
		mr  *verbs.MR
	}
	mk := func(d *verbs.Device) *side {
		s := &side{buf: make([]byte, 4096)}
		s.pd, _ = d.AllocPD()
		s.cq, _ = d.CreateCQ(16, nil, nil)
		s.qp, _ = s.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		s.mr, _ = s.pd.RegMR(s.buf, verbs.AccessLocalWrite)
		return s
	}
	a, b := mk(devA), mk(devB)
	connect := func(s *side, peer *verbs.Device, peerQPN uint32) {
		gid, _ := peer.QueryGID(1, 1) // GID 1: the IPv4-mapped address
		s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peerQPN, RQPSN: 0,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, DstPort: peer.LocalAddr().Port(),
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 1}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	}
	connect(a, devB, b.qp.QPN())
	connect(b, devA, a.qp.QPN())

	b.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 4096, LKey: b.mr.LKey()}}}})
	n := copy(a.buf, "hello, RDMA")
	a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}}})

	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); b.cq.Poll(wc) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(wc[0].Status, wc[0].Opcode == verbs.WCRecv, wc[0].WRID, string(b.buf[:wc[0].ByteLen]))
	// Output: success true 7 hello, RDMA
}
