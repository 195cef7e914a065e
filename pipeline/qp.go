package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/softroce/softroce/verbs"
)

// qpInfo is what one side of an RC connection tells the other (the usual
// out-of-band exchange: QPN, starting PSN, GID, UDP port, MTU).
type qpInfo struct {
	QPN  uint32
	PSN  uint32
	GID  verbs.GID
	Port uint16
	MTU  verbs.MTU
}

// rcGroup is a set of RC queue pairs sharing one CQ and completion channel.
// Several QPs keep several blocks in flight at once: each RC QP may have
// only 128 unacknowledged packets out (as rxe), so one QP is bound by the
// round-trip time.
type rcGroup struct {
	dev  *verbs.Device
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	qps  []*verbs.QP
	psns []uint32
}

// newRCGroup creates n RC QPs on pd, each with room for the given work
// requests, moved to INIT.
func newRCGroup(pd *verbs.PD, n, sendWR, recvWR int) (*rcGroup, error) {
	dev := pd.Device()
	g := &rcGroup{dev: dev, pd: pd, ch: dev.CreateCompChannel()}
	var err error
	if g.cq, err = dev.CreateCQ(n*(sendWR+recvWR)+16, nil, g.ch); err != nil {
		return nil, fmt.Errorf("pipeline: creating CQ: %w", err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	for range n {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: g.cq, RecvCQ: g.cq,
			Cap: verbs.QPCap{MaxSendWR: uint32(sendWR), MaxRecvWR: uint32(recvWR), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			g.close()
			return nil, fmt.Errorf("pipeline: creating RC QP: %w", err)
		}
		g.qps = append(g.qps, qp)
		g.psns = append(g.psns, rand.Uint32N(1<<24))
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			g.close()
			return nil, fmt.Errorf("pipeline: QP to INIT: %w", err)
		}
	}
	return g, nil
}

// infos describe this end's QPs for the peer.
func (g *rcGroup) infos() ([]qpInfo, error) {
	gid, err := g.dev.QueryGID(1, 1)
	if err != nil {
		return nil, fmt.Errorf("pipeline: querying GID 1: %w", err)
	}
	var out []qpInfo
	for i, qp := range g.qps {
		out = append(out, qpInfo{QPN: qp.QPN(), PSN: g.psns[i], GID: gid, Port: g.dev.LocalAddr().Port(), MTU: g.dev.ActiveMTU()})
	}
	return out, nil
}

// connect moves QP i to RTS towards remote[i].
func (g *rcGroup) connect(remote []qpInfo) error {
	if len(remote) != len(g.qps) {
		return fmt.Errorf("%w: peer has %d QPs, this end %d", ErrProtocol, len(remote), len(g.qps))
	}
	for i, qp := range g.qps {
		r := remote[i]
		mtu := min(g.dev.ActiveMTU(), r.MTU)
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: mtu, DestQPNum: r.QPN,
			RQPSN: r.PSN, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, DstPort: r.Port,
				GRH: verbs.GlobalRoute{DGID: r.GID, SGIDIndex: 1, HopLimit: 64}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("pipeline: QP to RTR: %w", err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: g.psns[i], Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("pipeline: QP to RTS: %w", err)
		}
	}
	return nil
}

// poll waits for at least one completion (polling, then arming the CQ and
// waiting on the completion channel) and returns how many it moved into wcs.
func (g *rcGroup) poll(ctx context.Context, wcs []verbs.WC) (int, error) {
	for {
		if n := g.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := g.cq.ReqNotify(false); err != nil {
			return 0, err
		}
		if n := g.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		cq, err := g.ch.GetCQEvent(ctx)
		if err != nil {
			return 0, err
		}
		cq.AckEvents(1)
	}
}

// close destroys the QPs and the CQ.
func (g *rcGroup) close() {
	for _, qp := range g.qps {
		qp.Destroy()
	}
	g.qps = nil
	if g.cq != nil {
		g.cq.Destroy()
		g.cq = nil
	}
}
