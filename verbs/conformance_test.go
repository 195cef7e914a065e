package verbs_test

// A conformance suite modelled on rdma-core's pyverbs tests (test_device,
// test_pd, test_cq, test_cq_events, test_mr, test_qp, test_qpex, test_atomic,
// test_srq, test_addr). Data-path tests run over link/pipe and over real
// UDP sockets on 127.0.0.1 / 127.0.0.2.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/verbs"
)

type linkKind struct {
	name string
	open func(t testing.TB) (*verbs.Device, *verbs.Device)
}

var linkKinds = []linkKind{
	{"pipe", func(t testing.TB) (*verbs.Device, *verbs.Device) {
		a, b, err := verbs.OpenPipe(pipe.Config{MTU: 65536}, pipe.Config{MTU: 65536})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}},
	{"udp", func(t testing.TB) (*verbs.Device, *verbs.Device) {
		if runtime.GOOS != "linux" {
			t.Skip("link/udp needs Linux")
		}
		a, err := verbs.OpenUDP("127.0.0.1:0", nil)
		if err != nil {
			t.Skip("no UDP loopback:", err)
		}
		b, err := verbs.OpenUDP("127.0.0.2:0", nil)
		if err != nil {
			a.Close()
			t.Skip("no 127.0.0.2:", err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}},
	// Same-host lanes (udp.Config.Local): the devices' datagrams go
	// through shared memory, not the kernel's loopback.
	{"udp-local", func(t testing.TB) (*verbs.Device, *verbs.Device) {
		if runtime.GOOS != "linux" {
			t.Skip("link/udp needs Linux")
		}
		var devs [2]*verbs.Device
		for i, addr := range []string{"127.0.0.1:0", "127.0.0.2:0"} {
			ep, err := udp.Listen(netip.MustParseAddrPort(addr), udp.WithAnyPort(), udp.WithLocal())
			if err != nil {
				t.Skip("no UDP loopback:", err)
			}
			d, err := verbs.Open(ep, nil)
			if err != nil {
				ep.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				d.Close()
				if s := ep.Stats(); s.PacketsOut > 0 && s.LocalOut == 0 {
					t.Errorf("%s: %d datagrams sent, none through the same-host lanes", addr, s.PacketsOut)
				}
			})
			devs[i] = d
		}
		return devs[0], devs[1]
	}},
}

func pipeDevs(t testing.TB) (*verbs.Device, *verbs.Device) { return linkKinds[0].open(t) }

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// end is one side of a connection.
type end struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	buf []byte
	mr  *verbs.MR
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func newEnd(t testing.TB, d *verbs.Device, typ verbs.QPType, srq *verbs.SRQ, pd *verbs.PD) *end {
	t.Helper()
	e := &end{dev: d, pd: pd}
	if e.pd == nil {
		e.pd = must[*verbs.PD](t)(d.AllocPD())
	}
	e.cq = must[*verbs.CQ](t)(d.CreateCQ(256, nil, nil))
	e.qp = must[*verbs.QP](t)(e.pd.CreateQP(&verbs.QPInitAttr{QPType: typ, SendCQ: e.cq, RecvCQ: e.cq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}}))
	e.buf = make([]byte, 1<<20)
	e.mr = must[*verbs.MR](t)(e.pd.RegMR(e.buf, allAccess))
	return e
}

func (e *end) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

func av(peer *verbs.Device) verbs.AHAttr {
	gid, _ := peer.QueryGID(1, 1)
	return verbs.AHAttr{IsGlobal: true, PortNum: 1, DstPort: peer.LocalAddr().Port(),
		GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}
}

func toRTS(t testing.TB, e, peer *end) {
	t.Helper()
	typ := e.qp.Type()
	m := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
	a := &verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: allAccess, QKey: 0x1234}
	if typ == verbs.QPTypeUD {
		m |= verbs.QPAttrQKey
	} else {
		m |= verbs.QPAttrAccessFlags
	}
	if err := e.qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
	a = &verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.qp.QPN(), RQPSN: 0xFFFFF0,
		MaxDestRdAtomic: 4, MinRNRTimer: 1, AHAttr: av(peer.dev)}
	m = verbs.QPAttrState
	switch typ {
	case verbs.QPTypeRC:
		m |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	case verbs.QPTypeUC:
		m |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	}
	if err := e.qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
	// SQ PSN near the 24-bit wrap to exercise PSN arithmetic.
	a = &verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0xFFFFF0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	m = verbs.QPAttrState | verbs.QPAttrSQPSN
	if typ == verbs.QPTypeRC {
		m |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := e.qp.Modify(a, m); err != nil {
		t.Fatal(err)
	}
}

func connected(t testing.TB, da, db *verbs.Device, typ verbs.QPType) (*end, *end) {
	a, b := newEnd(t, da, typ, nil, nil), newEnd(t, db, typ, nil, nil)
	toRTS(t, a, b)
	toRTS(t, b, a)
	return a, b
}

func poll(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]verbs.WC, 0, n)
	w := make([]verbs.WC, 16)
	for len(out) < n {
		k := cq.Poll(w[:min(16, n-len(out))])
		out = append(out, w[:k]...)
		if k == 0 {
			if ctx.Err() != nil {
				t.Fatalf("timed out: %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

func wantErrno(t testing.TB, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("error %v, want %v", err, errno)
	}
}

func TestDevice(t *testing.T) {
	da, _ := pipeDevs(t)
	attr := da.QueryDevice()
	if attr.MaxSGE != 32 || attr.MaxQPRdAtom != 128 || attr.MaxCQE != 1<<15-1 || attr.VendorID != 0xFFFFFF ||
		attr.MaxInlineData != 512 || attr.MaxMsgSz != 1<<31 || attr.PhysPortCnt != 1 || attr.MaxPKeys != 64 || attr.MaxQPWR != 1<<20 {
		t.Fatalf("%+v", attr)
	}
	pa, err := da.QueryPort(1)
	if err != nil || pa.State != verbs.PortActive || pa.ActiveMTU != verbs.MTU4096 || pa.MaxMTU != verbs.MTU4096 ||
		pa.LinkLayer != 2 || pa.GIDTblLen != 1024 {
		t.Fatalf("%+v %v", pa, err)
	}
	_, err = da.QueryPort(2)
	wantErrno(t, err, syscall.EINVAL)
	g0, _ := da.QueryGID(1, 0)
	if g0[0] != 0xfe || g0[1] != 0x80 || g0[11] != 0xff || g0[12] != 0xfe {
		t.Fatalf("GID 0 %v is not a link-local EUI-64 GID", g0)
	}
	g1, _ := da.QueryGID(1, 1)
	if g1.Addr() != da.LocalAddr().Addr() || !netip.AddrFrom16(g1).Is4In6() {
		t.Fatalf("GID 1 %v", g1)
	}
	_, err = da.QueryGID(1, 5000)
	wantErrno(t, err, syscall.EINVAL)
	if pk, err := da.QueryPKey(1, 0); err != nil || pk != 0xFFFF {
		t.Fatal(pk, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ev, err := da.GetAsyncEvent(ctx); err != nil || ev.Type != verbs.EventPortActive {
		t.Fatalf("%+v %v", ev, err)
	}
}

func TestPD(t *testing.T) {
	da, _ := pipeDevs(t)
	pds := make([]*verbs.PD, 100)
	for i := range pds {
		pds[i] = must[*verbs.PD](t)(da.AllocPD())
	}
	mr := must[*verbs.MR](t)(pds[0].RegMR(make([]byte, 10), verbs.AccessLocalWrite))
	wantErrno(t, pds[0].Dealloc(), syscall.EBUSY)
	mr.Deregister()
	for _, pd := range pds {
		if err := pd.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, pds[0].Dealloc(), syscall.EINVAL)
}

func TestMR(t *testing.T) {
	da, _ := pipeDevs(t)
	pd := must[*verbs.PD](t)(da.AllocPD())
	buf := make([]byte, 4096)
	for _, acc := range []verbs.Access{0, verbs.AccessLocalWrite, allAccess, verbs.AccessRemoteRead, verbs.AccessLocalWrite | verbs.AccessZeroBased} {
		mr := must[*verbs.MR](t)(pd.RegMR(buf, acc))
		if mr.LKey() != mr.RKey() || mr.LKey()>>8 == 0 || mr.Len() != 4096 {
			t.Fatalf("keys %x %x", mr.LKey(), mr.RKey())
		}
		if acc&verbs.AccessZeroBased != 0 && mr.Addr() != 0 {
			t.Fatal("zero-based MR with non-zero address")
		}
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, mr.Deregister(), syscall.EINVAL)
	}
	_, err := pd.RegMR(buf, verbs.AccessRemoteWrite)
	wantErrno(t, err, syscall.EINVAL)
	_, err = pd.RegMR(buf, verbs.AccessOnDemand)
	wantErrno(t, err, syscall.EOPNOTSUPP)
	mr := must[*verbs.MR](t)(pd.RegMR(buf, verbs.AccessLocalWrite))
	old := mr.LKey()
	if err := mr.Rereg(verbs.ReregChangeAccess|verbs.ReregChangeTranslation, nil, make([]byte, 100), allAccess); err != nil {
		t.Fatal(err)
	}
	if mr.Len() != 100 || mr.Access() != allAccess || mr.LKey() == old || mr.LKey()>>8 != old>>8 {
		t.Fatalf("rereg: len %d access %v key %x (was %x)", mr.Len(), mr.Access(), mr.LKey(), old)
	}
	wantErrno(t, mr.Rereg(0, nil, nil, 0), syscall.EINVAL)
	pd2 := must[*verbs.PD](t)(da.AllocPD())
	if err := mr.Rereg(verbs.ReregChangePD, pd2, nil, 0); err != nil || mr.PD() != pd2 {
		t.Fatal(err)
	}
	wantErrno(t, pd2.Dealloc(), syscall.EBUSY)
}

func TestCQ(t *testing.T) {
	da, _ := pipeDevs(t)
	_, err := da.CreateCQ(0, nil, nil)
	wantErrno(t, err, syscall.EINVAL)
	_, err = da.CreateCQ(1<<15, nil, nil)
	wantErrno(t, err, syscall.EINVAL)
	cq := must[*verbs.CQ](t)(da.CreateCQ(10, "ctx", nil))
	if cq.CQE() != 10 || cq.Context() != "ctx" || cq.Poll(make([]verbs.WC, 4)) != 0 {
		t.Fatal("fresh CQ")
	}
	if err := cq.Resize(100); err != nil || cq.CQE() != 100 {
		t.Fatal(err)
	}
	wantErrno(t, cq.ReqNotify(false), syscall.EINVAL) // no channel
	pd := must[*verbs.PD](t)(da.AllocPD())
	qp := must[*verbs.QP](t)(pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}))
	wantErrno(t, cq.Destroy(), syscall.EBUSY)
	qp.Destroy()
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// channelPair connects two RC QPs over lk whose second end's CQ (both
// queues) has a completion channel, for the tests of CQ events.
func channelPair(t *testing.T, lk linkKind) (*verbs.CompChannel, *verbs.CQ, *end, *end) {
	t.Helper()
	da, db := lk.open(t)
	a, b := connected(t, da, db, verbs.QPTypeRC)
	ch := db.CreateCompChannel()
	cq := must[*verbs.CQ](t)(db.CreateCQ(64, nil, ch))
	b2 := &end{dev: db, pd: b.pd, cq: cq, buf: b.buf, mr: b.mr}
	b2.qp = must[*verbs.QP](t)(b.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}}))
	a2 := newEnd(t, da, verbs.QPTypeRC, nil, a.pd)
	toRTS(t, a2, b2)
	toRTS(t, b2, a2)
	return ch, cq, a2, b2
}

// TestCQDisarmRearm: Disarm takes back an unused ReqNotify(false) (a
// completion then raises no event), and Rearm arms again, raising at once
// when completions already wait; a solicited-only arming is left alone.
func TestCQDisarmRearm(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			ch, cq, a2, b2 := channelPair(t, lk)
			defer b2.qp.Destroy()
			for i := range 4 {
				b2.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: b2.sge(64*i, 64)}})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			noEvent := func(what string) {
				t.Helper()
				select {
				case <-ch.C():
					t.Fatalf("an event %s", what)
				case <-time.After(20 * time.Millisecond):
				}
			}
			send := func(flags verbs.SendFlags) {
				t.Helper()
				a2.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: flags, SGList: a2.sge(0, 10)}})
				for deadline := time.Now().Add(5 * time.Second); cq.Len() == 0; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("no completion within 5 s")
					}
				}
			}
			cq.ReqNotify(false)
			if !cq.Disarm() || cq.Disarm() {
				t.Fatal("Disarm after ReqNotify(false): want true, then false")
			}
			send(0)
			noEvent("for a completion on a disarmed CQ")
			if err := cq.Rearm(); err != nil {
				t.Fatal(err)
			}
			if got, err := ch.GetCQEvent(ctx); err != nil || got != cq {
				t.Fatalf("Rearm with a completion waiting: no event (%v)", err)
			}
			poll(t, cq, 1)
			cq.Rearm() // nothing waits: armed for the next
			noEvent("from Rearm on an empty CQ")
			send(0)
			if _, err := ch.GetCQEvent(ctx); err != nil {
				t.Fatalf("Rearm on an empty CQ: no event for the next completion (%v)", err)
			}
			poll(t, cq, 1)
			cq.ReqNotify(true)
			if cq.Disarm() {
				t.Fatal("Disarm took back a solicited-only arming")
			}
			send(verbs.SendSolicited)
			if _, err := ch.GetCQEvent(ctx); err != nil {
				t.Fatalf("solicited-only arming lost to Disarm (%v)", err)
			}
			poll(t, cq, 1)
			cq.AckEvents(3)
		})
	}
}

func TestCQEvents(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			ch, cq, a2, b2 := channelPair(t, lk)
			var notified atomic.Int32 // SetNotify: one call per event
			ch.SetNotify(func() { notified.Add(1) })
			b2.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b2.sge(0, 64)}, {WRID: 2, SGList: b2.sge(64, 64)}, {WRID: 3, SGList: b2.sge(128, 64)}})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := cq.ReqNotify(false); err != nil {
				t.Fatal(err)
			}
			a2.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: a2.sge(0, 10)}})
			got, err := ch.GetCQEvent(ctx)
			if err != nil || got != cq {
				t.Fatal(err)
			}
			// The notify function runs after the event is queued (a
			// waiter it wakes must find the event), so it may still be
			// on its way when GetCQEvent returns.
			waitNotified := func(want int32) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); notified.Load() < want && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond) // room for a wrong extra call
				if n := notified.Load(); n != want {
					t.Fatalf("notify called %d times for %d events", n, want)
				}
			}
			waitNotified(1)
			poll(t, cq, 1)
			// Solicited only: an unsolicited message raises no event, a solicited one does.
			cq.ReqNotify(true)
			a2.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGList: a2.sge(0, 10)}})
			poll(t, cq, 1)
			select {
			case <-ch.C():
				t.Fatal("event for an unsolicited completion")
			case <-time.After(20 * time.Millisecond):
			}
			a2.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSolicited, SGList: a2.sge(0, 10)}})
			if _, err := ch.GetCQEvent(ctx); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, cq, 1); wc[0].WRID != 3 {
				t.Fatalf("%+v", wc)
			}
			waitNotified(2)
			ch.SetNotify(nil)
			wantErrno(t, cq.Destroy(), syscall.EBUSY) // unacked events, and a QP
			cq.AckEvents(2)
			b2.qp.Destroy()
			if err := cq.Destroy(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestQPStateMachine(t *testing.T) {
	da, db := pipeDevs(t)
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			a, b := newEnd(t, da, typ, nil, nil), newEnd(t, db, typ, nil, nil)
			if a.qp.QPN() < 0x11 || a.qp.State() != verbs.QPStateReset {
				t.Fatalf("qpn %x state %v", a.qp.QPN(), a.qp.State())
			}
			// RESET -> RTR is not a transition.
			wantErrno(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState), syscall.EINVAL)
			// RESET -> INIT without its required attributes.
			wantErrno(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit}, verbs.QPAttrState), syscall.EINVAL)
			// Posting sends before RTS fails.
			_, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}})
			wantErrno(t, err, syscall.EINVAL)
			// RESET -> ERR is not allowed (kernel table).
			wantErrno(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState), syscall.EINVAL)
			toRTS(t, a, b)
			toRTS(t, b, a)
			attr, init := a.qp.Query()
			if attr.QPState != verbs.QPStateRTS || init.QPType != typ || attr.Cap.MaxSendWR < 64 {
				t.Fatalf("%+v", attr)
			}
			if typ == verbs.QPTypeRC && (attr.DestQPNum != b.qp.QPN() || attr.PathMTU != verbs.MTU1024 || attr.RetryCnt != 7 || attr.Timeout != 14) {
				t.Fatalf("%+v", attr)
			}
			if typ == verbs.QPTypeUD && attr.QKey != 0x1234 {
				t.Fatalf("qkey %x", attr.QKey)
			}
			// An attribute not allowed in RTS -> RTS.
			wantErrno(t, a.qp.Modify(&verbs.QPAttr{PathMTU: verbs.MTU256}, verbs.QPAttrPathMTU), syscall.EINVAL)
			// Bad values.
			if typ == verbs.QPTypeRC {
				wantErrno(t, a.qp.Modify(&verbs.QPAttr{MinRNRTimer: 40}, verbs.QPAttrMinRNRTimer), syscall.EINVAL)
			}
			if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			toRTS(t, a, b)
			if err := a.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, a.qp.Destroy(), syscall.EINVAL)
		})
	}
}

// TestOperations runs every operation, including zero-length ones, over
// each link, and checks completions and memory.
func TestOperations(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			a, b := connected(t, da, db, verbs.QPTypeRC)
			fill := func(p []byte, s byte) {
				for i := range p {
					p[i] = s + byte(i*31)
				}
			}
			for _, size := range []int{0, 1, 1023, 1024, 1025, 9000} {
				fill(a.buf[:size], byte(size))
				// SEND, SEND_WITH_IMM, SEND_WITH_INV, WRITE, WRITE_WITH_IMM.
				b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.sge(0, 16384)}, {WRID: 2, SGList: b.sge(0, 16384)},
					{WRID: 3, SGList: b.sge(0, 16384)}, {WRID: 4, SGList: b.sge(0, 0)}})
				// SEND_WITH_INV may invalidate a type 2 window bound to b's QP
				// (an ordinary MR is refused, as rxe).
				invMR := must[*verbs.MR](t)(b.pd.RegMR(b.buf[500000:501000], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind))
				inv := must[*verbs.MW](t)(b.pd.AllocMW(verbs.MWType2))
				if _, err := b.qp.PostSend([]verbs.SendWR{{WRID: 99, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: inv, RKey: verbs.IncRKey(inv.RKey()),
					BindInfo: verbs.MWBindInfo{MR: invMR, Addr: invMR.Addr(), Length: 1000, Access: verbs.AccessRemoteWrite}}}); err != nil {
					t.Fatal(err)
				}
				if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
					t.Fatalf("bind: %+v", wc)
				}
				wrs := []verbs.SendWR{
					{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, size)},
					{WRID: 2, Opcode: verbs.WRSendWithImm, ImmData: 0xdeadbeef, Flags: verbs.SendSignaled, SGList: a.sge(0, size)},
					{WRID: 3, Opcode: verbs.WRSendWithInv, ImmData: inv.RKey(), Flags: verbs.SendSignaled, SGList: a.sge(0, size)},
					{WRID: 4, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 7, Flags: verbs.SendSignaled, SGList: a.sge(0, size),
						RemoteAddr: b.mr.Addr() + 100000, RKey: b.mr.RKey()},
					{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, size),
						RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
					{WRID: 6, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(300000, size),
						RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
				}
				if n, err := a.qp.PostSend(wrs); err != nil || n != len(wrs) {
					t.Fatal(n, err)
				}
				swc := poll(t, a.cq, len(wrs))
				for i, wc := range swc {
					if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) || wc.QPNum != a.qp.QPN() {
						t.Fatalf("size %d: send wc %d %+v", size, i, wc)
					}
				}
				if swc[5].Opcode != verbs.WCRDMARead || swc[5].ByteLen != uint32(size) || swc[3].Opcode != verbs.WCRDMAWrite {
					t.Fatalf("%+v", swc)
				}
				rwc := poll(t, b.cq, 4)
				want := []struct {
					op  verbs.WCOpcode
					fl  verbs.WCFlags
					imm uint32
				}{{verbs.WCRecv, 0, 0}, {verbs.WCRecv, verbs.WCWithImm, 0xdeadbeef}, {verbs.WCRecv, verbs.WCWithInv, inv.RKey()},
					{verbs.WCRecvRDMAWithImm, verbs.WCWithImm, 7}}
				for i, wc := range rwc {
					if wc.Status != verbs.WCSuccess || wc.Opcode != want[i].op || wc.Flags != want[i].fl || wc.ImmData != want[i].imm ||
						wc.ByteLen != uint32(size) || wc.SrcQP != a.qp.QPN() {
						t.Fatalf("size %d: recv wc %d %+v", size, i, wc)
					}
				}
				sync(t, a, b)
				if inv.Bound() {
					t.Fatal("SEND_WITH_INV did not invalidate the window")
				}
				inv.Dealloc()
				invMR.Deregister()
				if !bytes.Equal(b.buf[:size], a.buf[:size]) || !bytes.Equal(b.buf[100000:100000+size], a.buf[:size]) ||
					!bytes.Equal(b.buf[200000:200000+size], a.buf[:size]) || !bytes.Equal(a.buf[300000:300000+size], a.buf[:size]) {
					t.Fatalf("size %d: data mismatch", size)
				}
			}
			// Inline send, several SGEs, unsignaled WRs.
			b.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: append(b.sge(0, 5), b.sge(10, 100)...)}})
			copy(a.buf[1000:], "abcdefghij")
			a.qp.PostSend([]verbs.SendWR{
				{WRID: 10, Opcode: verbs.WRRDMAWrite, SGList: a.sge(1000, 3), RemoteAddr: b.mr.Addr() + 5000, RKey: b.mr.RKey()},
				{WRID: 11, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: []byte("inline!!")},
			})
			if wc := poll(t, a.cq, 1); wc[0].WRID != 11 {
				t.Fatalf("unsignaled WR completed: %+v", wc)
			}
			if wc := poll(t, b.cq, 1); wc[0].ByteLen != 8 || string(b.buf[:5])+string(b.buf[10:13]) != "inline!!" {
				t.Fatalf("%+v %q", wc, b.buf[:13])
			}
			// LOCAL_INV.
			mr2 := must[*verbs.MR](t)(a.pd.RegMR(a.buf[:10], verbs.AccessLocalWrite))
			a.qp.PostSend([]verbs.SendWR{{WRID: 12, Opcode: verbs.WRLocalInv, ImmData: mr2.LKey(), Flags: verbs.SendSignaled}})
			if wc := poll(t, a.cq, 1); wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCLocalInv || mr2.Valid() {
				t.Fatalf("%+v", wc)
			}
		})
	}
}

func TestAtomics(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			a, b := connected(t, da, db, verbs.QPTypeRC)
			binary.NativeEndian.PutUint64(b.buf[8:], 1)
			publish(t, b)
			var wrs []verbs.SendWR
			for i := 0; i < 10; i++ {
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
					SGList: a.sge(8*i, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 2})
			}
			wrs = append(wrs, verbs.SendWR{WRID: 10, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
				SGList: a.sge(80, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 21, Swap: 1000})
			a.qp.PostSend(wrs)
			for _, wc := range poll(t, a.cq, 11) {
				if wc.Status != verbs.WCSuccess || wc.ByteLen != 8 {
					t.Fatalf("%+v", wc)
				}
			}
			sync(t, a, b)
			for i := 0; i < 10; i++ {
				if v := binary.NativeEndian.Uint64(a.buf[8*i:]); v != uint64(1+2*i) {
					t.Fatalf("fetch-add %d returned %d", i, v)
				}
			}
			if v := binary.NativeEndian.Uint64(b.buf[8:]); v != 1000 || binary.NativeEndian.Uint64(a.buf[80:]) != 21 {
				t.Fatalf("after cmp-swap: %d", v)
			}
			_, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRAtomicFetchAndAdd, SGList: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}})
			wantErrno(t, err, syscall.EINVAL)
		})
	}
}

func TestBadFlows(t *testing.T) {
	da, db := pipeDevs(t)
	a, b := connected(t, da, db, verbs.QPTypeRC)
	// Too many SGEs: the bad WR is reported by index.
	sges := make([]verbs.SGE, 5)
	for i := range sges {
		sges[i] = a.sge(0, 1)[0]
	}
	b.qp.PostRecv([]verbs.RecvWR{{SGList: b.sge(0, 64)}})
	n, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 1)}, {WRID: 2, Opcode: verbs.WRSend, SGList: sges}})
	if n != 1 {
		t.Fatalf("posted %d", n)
	}
	wantErrno(t, err, syscall.EINVAL)
	// Bad lkey.
	_, err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 4, LKey: 0xdead00}}}})
	wantErrno(t, err, syscall.EINVAL)
	// SGE outside the MR.
	_, err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: a.sge(len(a.buf)-2, 4)}})
	wantErrno(t, err, syscall.EINVAL)
	// Invalid opcode for RC.
	_, err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRTSO}})
	wantErrno(t, err, syscall.EINVAL)
	// Send queue full -> ENOMEM.
	poll(t, a.cq, 1)
	wrs := make([]verbs.SendWR, 100)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: 1} // bad rkey: stays queued after ERR? no, check count
	}
	a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.QPAttrState)
	n, err = a.qp.PostSend(wrs)
	if n != 64 {
		t.Fatalf("posted %d into a 64-entry queue", n)
	}
	wantErrno(t, err, syscall.ENOMEM)
	// Posting to ERR flushes.
	a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	for _, wc := range poll(t, a.cq, 64) {
		if wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("%+v", wc)
		}
	}
	a.qp.PostSend([]verbs.SendWR{{WRID: 77, Opcode: verbs.WRSend}})
	if wc := poll(t, a.cq, 1); wc[0].Status != verbs.WCWRFlushErr || wc[0].WRID != 77 {
		t.Fatalf("%+v", wc)
	}
	a.qp.PostRecv([]verbs.RecvWR{{WRID: 78}})
	if wc := poll(t, a.cq, 1); wc[0].Status != verbs.WCWRFlushErr || wc[0].WRID != 78 || wc[0].Opcode != verbs.WCRecv {
		t.Fatalf("%+v", wc)
	}
}

func TestSRQ(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			pdb := must[*verbs.PD](t)(db.AllocPD())
			_, err := pdb.CreateSRQ(verbs.SRQAttr{MaxWR: 0}, nil)
			wantErrno(t, err, syscall.EINVAL)
			srq := must[*verbs.SRQ](t)(pdb.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}, nil))
			for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUD} {
				a, b := newEnd(t, da, typ, nil, nil), newEnd(t, db, typ, srq, pdb)
				toRTS(t, a, b)
				toRTS(t, b, a)
				_, err := b.qp.PostRecv([]verbs.RecvWR{{SGList: b.sge(0, 10)}})
				wantErrno(t, err, syscall.EINVAL)
				if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: b.sge(0, 4096)}}); err != nil {
					t.Fatal(err)
				}
				wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 100)}
				if typ == verbs.QPTypeUD {
					ah := must[*verbs.AH](t)(a.pd.CreateAH(ptr(av(db))))
					wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, b.qp.QPN(), 0x1234
				}
				a.qp.PostSend([]verbs.SendWR{wr})
				wc := poll(t, b.cq, 1)
				if wc[0].Status != verbs.WCSuccess || wc[0].WRID != 5 || wc[0].QPNum != b.qp.QPN() {
					t.Fatalf("%v: %+v", typ, wc)
				}
				poll(t, a.cq, 1)
				wantErrno(t, srq.Destroy(), syscall.EBUSY)
				b.qp.Destroy()
			}
			if err := srq.Destroy(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sync makes b's memory safe to read in the test: a SEND after earlier
// operations completes at b after they were executed (the race detector
// cannot see ordering through a UDP socket).
func sync(t testing.TB, a, b *end) {
	t.Helper()
	b.qp.PostRecv([]verbs.RecvWR{{WRID: 999}})
	a.qp.PostSend([]verbs.SendWR{{WRID: 999, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}})
	poll(t, a.cq, 1)
	if wc := poll(t, b.cq, 1); wc[0].WRID != 999 {
		t.Fatalf("sync: %+v", wc)
	}
}

// publish orders the test's earlier writes to e's memory before the
// device's handling of later requests on e's QP (for the race detector,
// which cannot see ordering through a UDP socket): any call on the QP does.
func publish(t testing.TB, e *end) {
	e.qp.Query()
}

func ptr[T any](v T) *T { return &v }

func TestAH(t *testing.T) {
	da, db := pipeDevs(t)
	pd := must[*verbs.PD](t)(da.AllocPD())
	_, err := pd.CreateAH(&verbs.AHAttr{PortNum: 1})
	wantErrno(t, err, syscall.EINVAL)
	bad := av(db)
	bad.GRH.SGIDIndex = 9
	_, err = pd.CreateAH(&bad)
	wantErrno(t, err, syscall.EINVAL)
	zero := av(db)
	zero.GRH.DGID = verbs.GID{}
	_, err = pd.CreateAH(&zero)
	wantErrno(t, err, syscall.EINVAL)
	ah := must[*verbs.AH](t)(pd.CreateAH(ptr(av(db))))
	if ah.Attr().GRH.DGID.Addr() != db.LocalAddr().Addr() {
		t.Fatal(ah.Attr())
	}
	wantErrno(t, pd.Dealloc(), syscall.EBUSY)
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestCQOverflow(t *testing.T) {
	da, db := pipeDevs(t)
	a := newEnd(t, da, verbs.QPTypeRC, nil, nil)
	b := newEnd(t, db, verbs.QPTypeRC, nil, nil)
	small := must[*verbs.CQ](t)(db.CreateCQ(2, nil, nil))
	b.qp.Destroy()
	b.qp = must[*verbs.QP](t)(b.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: small, RecvCQ: small, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}}))
	toRTS(t, a, b)
	toRTS(t, b, a)
	for i := 0; i < 3; i++ {
		b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: b.sge(0, 64)}})
	}
	for i := 0; i < 3; i++ {
		a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGList: a.sge(0, 8)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seen := map[verbs.EventType]bool{}
	for !seen[verbs.EventCQErr] || !seen[verbs.EventQPFatal] {
		ev, err := db.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("events %v: %v", seen, err)
		}
		seen[ev.Type] = true
	}
	if b.qp.State() != verbs.QPStateErr {
		t.Fatal(b.qp.State())
	}
}

// TestGID0FromInterfaceMAC: a device opened on an interface's address has
// the interface's EUI-64 link-local GID at index 0, like rxe (docs/protocol.md §9).
func TestGID0FromInterfaceMAC(t *testing.T) {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if len(ifc.HardwareAddr) != 6 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			n, ok := x.(*net.IPNet)
			if !ok || n.IP.To4() == nil {
				continue
			}
			d, err := verbs.OpenUDP(net.JoinHostPort(n.IP.String(), "0"), nil)
			if err != nil {
				continue
			}
			defer d.Close()
			m := ifc.HardwareAddr
			want := netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]})
			if g, _ := d.QueryGID(1, 0); netip.AddrFrom16(g) != want {
				t.Fatalf("GID 0 %v, want %v (from %v's MAC %v)", g, want, ifc.Name, m)
			}
			return
		}
	}
	t.Skip("no up interface with a MAC and an IPv4 address")
}
