package verbs

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/wire"
)

// fuzzRig is a device with live RC, UC and UD QPs whose MR sits in the
// middle of a larger buffer with canary bytes around it.
type fuzzRig struct {
	mu     sync.Mutex
	dev    *Device
	peer   link.Endpoint
	pd     *PD
	qps    [3]*QP
	outer  []byte
	canary []byte
	mr     *MR
	src    netip.AddrPort
}

var (
	rigOnce sync.Once
	rig     *fuzzRig
)

func getRig(t testing.TB) *fuzzRig {
	rigOnce.Do(func() {
		ea, eb, err := pipe.New(pipe.Config{MTU: 65536, QueueLen: 1 << 16}, pipe.Config{MTU: 65536})
		if err != nil {
			panic(err)
		}
		d, _ := Open(ea, &Config{NoICRCCheck: true})
		r := &fuzzRig{dev: d, peer: eb, src: eb.LocalAddr()}
		r.pd, _ = d.AllocPD()
		cq, _ := d.CreateCQ(maxCQE, nil, nil)
		r.outer = make([]byte, 3*4096)
		r.canary = make([]byte, len(r.outer))
		fill(r.canary, 0x5A)
		copy(r.outer, r.canary)
		r.mr, _ = r.pd.RegMR(r.outer[4096:8192], AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessFlushGlobal)
		for i, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
			r.qps[i], _ = r.pd.CreateQP(&QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxRecvSGE: 2}})
		}
		// Drain what the device sends so the pipe never backs up.
		go func() {
			pk := make([]link.Packet, 16)
			for i := range pk {
				pk[i].Buf = make([]byte, maxDatagram)
			}
			for {
				if _, err := eb.ReadBatch(pk); err != nil {
					return
				}
			}
		}()
		go func() {
			w := make([]WC, 256)
			for {
				if cq.Poll(w) == 0 {
					select {
					case <-d.done:
						return
					default:
					}
				}
			}
		}()
		rig = r
	})
	return rig
}

// ready brings every QP back to RTS with receive WQEs posted.
func (r *fuzzRig) ready(t testing.TB) {
	for _, qp := range r.qps {
		if qp.State() == QPStateRTS && qp.rqLen() > 4 {
			continue
		}
		o := pairOpts{typ: qp.typ}
		defaults(&o)
		qp.Modify(&QPAttr{QPState: QPStateReset}, QPAttrState)
		peer := &side{qp: &QP{qpn: 0x20}, dev: &Device{gids: makeGIDs(r.src.Addr(), [6]byte{})}, port: r.src.Port()}
		s := &side{qp: qp}
		connect(t, s, peer, o)
		wr := []RecvWR{{SGList: []SGE{{Addr: r.mr.Addr(), Length: 2048, LKey: r.mr.LKey()}, {Addr: r.mr.Addr() + 2048, Length: 2048, LKey: r.mr.LKey()}}}}
		for qp.rqLen() < 32 {
			qp.PostRecv(wr)
		}
	}
}

func (qp *QP) rqLen() int { qp.mu.Lock(); defer qp.mu.Unlock(); return qp.rq.n }

func seedPackets(r *fuzzRig) [][]byte {
	var out [][]byte
	va, key := r.mr.Addr(), r.mr.RKey()
	add := func(h wire.Packet) { out = append(out, h.Append(nil)) }
	rc, uc, ud := r.qps[0].QPN(), r.qps[1].QPN(), r.qps[2].QPN()
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF}, Payload: []byte("hello")})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va + 10, RKey: key, Length: 5}, Payload: []byte("world")})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteFirst, DestQP: rc, PSN: 100, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va, RKey: key, Length: 2048}, Payload: make([]byte, 1024)})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va, RKey: key, Length: 4096}})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCFetchAdd, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		AtomicETH: wire.AtomicETH{VA: va + 8, RKey: key, SwapAdd: 1}})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAtomicWrite, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va + 16, RKey: key, Length: 8}, Payload: make([]byte, 8)})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCFlush, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va, RKey: key, Length: 64}, FETH: wire.FETH{PLT: 1}})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, DestQP: rc, PSN: 100, PKey: 0xFFFF}, AETH: wire.AETH{Syndrome: 0x1F}})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadResponseOnly, DestQP: rc, PSN: 100, PKey: 0xFFFF}, AETH: wire.AETH{Syndrome: 0x1F}, Payload: []byte("x")})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.UCSendOnly, DestQP: uc, PSN: 100, PKey: 0xFFFF}, Payload: []byte("uc")})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.UCWriteOnlyImm, DestQP: uc, PSN: 100, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va + 4000, RKey: key, Length: 96}, Payload: make([]byte, 96)})
	// The region's exact end: a WRITE one byte past it must change nothing.
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.UCWriteOnly, DestQP: uc, PSN: 100, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va + 4096 - 95, RKey: key, Length: 96}, Payload: make([]byte, 96)})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, DestQP: rc, PSN: 100, AckReq: true, PKey: 0xFFFF},
		RETH: wire.RETH{VA: va + 4096 - 3, RKey: key, Length: 4}, Payload: make([]byte, 4)})
	add(wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnlyImm, DestQP: ud, PSN: 1, PKey: 0xFFFF},
		DETH: wire.DETH{QKey: 0x11111111, SrcQP: 5}, Payload: []byte("ud datagram")})
	return out
}

func FuzzDeviceInput(f *testing.F) {
	r := getRig(f)
	for _, s := range seedPackets(r) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ready(t)
		lp := link.Packet{Buf: b, N: len(b), Src: r.src, Dst: r.dev.local}
		var p wire.Packet
		r.dev.input(&lp, &p)
		// Nothing outside the registered region may change.
		r.mr.mu.Lock()
		ok := bytes.Equal(r.outer[:4096], r.canary[:4096]) && bytes.Equal(r.outer[8192:], r.canary[8192:])
		r.mr.mu.Unlock()
		if !ok {
			t.Fatal("bytes outside the MR changed")
		}
	})
}
