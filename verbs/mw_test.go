package verbs_test

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/verbs"
)

// TestMemoryWindows runs type 1 and type 2 windows over every link kind:
// bind, RDMA WRITE/READ with offsets, remote invalidation, deallocation
// (pyverbs test_mr.py's MW cases).
func TestMemoryWindows(t *testing.T) {
	for _, lk := range linkKinds {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			if at := db.QueryDevice(); at.MaxMW == 0 {
				t.Fatal("MaxMW is 0")
			}
			a, b := connected(t, da, db, verbs.QPTypeRC)
			buf := make([]byte, 1<<16)
			mr := must[*verbs.MR](t)(b.pd.RegMR(buf, allAccess|verbs.AccessMWBind))

			// Type 1: ibv_bind_mw.
			mw1 := must[*verbs.MW](t)(b.pd.AllocMW(verbs.MWType1))
			k1, err := b.qp.BindMW(mw1, verbs.MWBind{WRID: 1, Flags: verbs.SendSignaled,
				BindInfo: verbs.MWBindInfo{MR: mr, Addr: mr.Addr() + 1024, Length: 4096, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}})
			if err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
				t.Fatalf("%+v", wc)
			}
			copy(a.buf, "through a type 1 window")
			// WRITE_WITH_IMM: b's receive completion orders b's read of
			// the written bytes after the device's write (see package doc).
			b.qp.PostRecv([]verbs.RecvWR{{WRID: 20, SGList: b.sge(0, 64)}})
			a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: a.sge(0, 23),
				RemoteAddr: mr.Addr() + 1024 + 100, RKey: k1}})
			if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("%+v", wc)
			}
			if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm {
				t.Fatalf("%+v", wc)
			}
			if !bytes.Equal(buf[1124:1147], a.buf[:23]) {
				t.Fatal("write through the type 1 window missing")
			}

			// Type 2: IBV_WR_BIND_MW, zero-based, then remote invalidation.
			copy(buf[8192+500:], "read through a type 2 window") // before the bind: a call on b's QP publishes it
			mw2 := must[*verbs.MW](t)(b.pd.AllocMW(verbs.MWType2))
			k2 := verbs.IncRKey(mw2.RKey())
			b.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw2, RKey: k2,
				BindInfo: verbs.MWBindInfo{MR: mr, Addr: mr.Addr() + 8192, Length: 8192, Access: verbs.AccessRemoteRead | verbs.AccessZeroBased}}})
			if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
				t.Fatalf("%+v", wc)
			}
			a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(100, 28),
				RemoteAddr: 500, RKey: k2}})
			if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("%+v", wc)
			}
			if string(a.buf[100:128]) != "read through a type 2 window" {
				t.Fatalf("read %q", a.buf[100:128])
			}
			wantErrno(t, mr.Deregister(), syscall.EBUSY)
			b.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: b.sge(0, 64)}})
			a.qp.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SGList: a.sge(0, 8), ImmData: k2}})
			poll(t, a.cq, 1)
			if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithInv == 0 || wc.ImmData != k2 {
				t.Fatalf("%+v", wc)
			}
			a.qp.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(100, 8),
				RemoteAddr: 0, RKey: k2}})
			if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
				t.Fatalf("read through an invalidated window: %+v", wc)
			}
			if err := mw1.Dealloc(); err != nil {
				t.Fatal(err)
			}
			if err := mw2.Dealloc(); err != nil {
				t.Fatal(err)
			}
			if err := mr.Deregister(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDmabufMR: RDMA WRITE and READ on memfd memory registered by fd,
// offset and length (pyverbs test_mr.py's dma-buf cases).
func TestDmabufMR(t *testing.T) {
	fd, err := mem.Memfd("verbs-dmabuf", 1<<16)
	if err != nil {
		t.Skip("memfd:", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	da, db := pipeDevs(t)
	a, b := connected(t, da, db, verbs.QPTypeRC)
	mr, err := b.pd.RegDmabufMR(fd, 4096, 32768, 0x100000, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Deregister()
	copy(a.buf, "into a memfd")
	a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 12),
		RemoteAddr: 0x100000 + 64, RKey: mr.RKey()}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	got := make([]byte, 12)
	f.ReadAt(got, 4096+64)
	if string(got) != "into a memfd" {
		t.Fatalf("memfd holds %q", got)
	}
	f.WriteAt([]byte("out of a memfd"), 4096+1000)
	a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(200, 14),
		RemoteAddr: 0x100000 + 1000, RKey: mr.RKey()}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	if string(a.buf[200:214]) != "out of a memfd" {
		t.Fatalf("read %q", a.buf[200:214])
	}
	// Beyond the registered length: remote access error.
	a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(0, 16),
		RemoteAddr: 0x100000 + 32768 - 8, RKey: mr.RKey()}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("%+v", wc)
	}
}
