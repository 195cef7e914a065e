package verbs_test

import (
	"fmt"
	"time"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// pair is an RC connection between two devices joined by a pipe, for the
// examples below (see Example for the connection steps).
type pair struct {
	devA, devB *verbs.Device
	a, b       *verbs.QP
	pdA, pdB   *verbs.PD
	cqA, cqB   *verbs.CQ
}

func newExamplePair() *pair {
	devA, devB, err := verbs.OpenPipe(pipe.Config{}, pipe.Config{})
	if err != nil {
		panic(err)
	}
	p := &pair{devA: devA, devB: devB}
	p.pdA, _ = devA.AllocPD()
	p.pdB, _ = devB.AllocPD()
	p.cqA, _ = devA.CreateCQ(16, nil, nil)
	p.cqB, _ = devB.CreateCQ(16, nil, nil)
	mk := func(pd *verbs.PD, cq *verbs.CQ) *verbs.QP {
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return qp
	}
	p.a, p.b = mk(p.pdA, p.cqA), mk(p.pdB, p.cqB)
	conn := func(qp *verbs.QP, peer *verbs.Device, peerQPN uint32) {
		gid, _ := peer.QueryGID(1, 1)
		qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1,
			QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peerQPN,
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, DstPort: peer.LocalAddr().Port(),
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 1}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	}
	conn(p.a, devB, p.b.QPN())
	conn(p.b, devA, p.a.QPN())
	return p
}

func (p *pair) close() { p.devA.Close(); p.devB.Close() }

func wait(cq *verbs.CQ) verbs.WC {
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); cq.Poll(wc) == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	return wc[0]
}

// A type 2 memory window exposes 4 KiB of a larger MR, zero-based, to the
// peer; a SEND_WITH_INV from the peer revokes it.
func Example_memoryWindow() {
	p := newExamplePair()
	defer p.close()
	buf := make([]byte, 1<<16)
	mr, _ := p.pdB.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	mw, _ := p.pdB.AllocMW(verbs.MWType2)
	rkey := verbs.IncRKey(mw.RKey()) // the consumer picks the new key8
	p.b.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw, RKey: rkey,
		BindInfo: verbs.MWBindInfo{MR: mr, Addr: mr.Addr() + 8192, Length: 4096,
			Access: verbs.AccessRemoteWrite | verbs.AccessZeroBased}}})
	fmt.Println("bind:", wait(p.cqB).Status)

	// Receives for the WRITE_WITH_IMM and the SEND_WITH_INV below.
	rbuf := make([]byte, 64)
	rmr, _ := p.pdB.RegMR(rbuf, verbs.AccessLocalWrite)
	recv := verbs.RecvWR{SGList: []verbs.SGE{{Addr: rmr.Addr(), Length: 64, LKey: rmr.LKey()}}}
	p.b.PostRecv([]verbs.RecvWR{recv, recv})

	// The peer writes at window offset 16 (MR offset 8192+16); the
	// immediate's completion tells b the bytes are there.
	src := []byte("hello, window")
	smr, _ := p.pdA.RegMR(src, 0)
	p.a.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, RemoteAddr: 16, RKey: rkey,
		SGList: []verbs.SGE{{Addr: smr.Addr(), Length: uint32(len(src)), LKey: smr.LKey()}}}})
	fmt.Println("write:", wait(p.cqA).Status, wait(p.cqB).Status, string(buf[8192+16:8192+16+len(src)]))

	// The peer invalidates the window; its key is dead afterwards.
	p.a.PostSend([]verbs.SendWR{{Opcode: verbs.WRSendWithInv, ImmData: rkey}})
	wc := wait(p.cqB)
	fmt.Println("invalidated:", wc.Flags&verbs.WCWithInv != 0, wc.ImmData == rkey, mw.Bound())
	p.a.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: 16, RKey: rkey,
		SGList: []verbs.SGE{{Addr: smr.Addr(), Length: uint32(len(src)), LKey: smr.LKey()}}}})
	fmt.Println("write after invalidation:", wait(p.cqA).Status)
	// Output:
	// bind: success
	// write: success success hello, window
	// invalidated: true true false
	// write after invalidation: remote access error
}
