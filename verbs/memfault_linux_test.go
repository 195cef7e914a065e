package verbs

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnmappedMR: memory unmapped while registered is an access error, not
// a dead process: a WRITE into it is NAKed (REM_ACCESS_ERR at the
// requester), a SEND from it completes with LOC_PROT_ERR.
func TestUnmappedMR(t *testing.T) {
	const n = 1 << 16
	t.Run("remote write into it", func(t *testing.T) {
		a, b := newPair(t, pairOpts{bufSize: 8192})
		m, mr := mmapMR(t, b.pd, n, AccessLocalWrite|AccessRemoteWrite)
		addr := mr.Addr()
		if err := unix.Munmap(m); err != nil {
			t.Fatal(err)
		}
		src := localMR(t, a, 0)
		if _, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGList: []SGE{{Addr: src.Addr(), Length: 64, LKey: src.LKey()}}, RemoteAddr: addr, RKey: mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		wantWC(t, a.scq, WCRemAccessErr, WCRDMAWrite)
	})
	t.Run("send from it", func(t *testing.T) {
		a, b := newPair(t, pairOpts{bufSize: 8192, noZC: true})
		m, mr := mmapMR(t, a.pd, n, AccessLocalWrite)
		if err := unix.Munmap(m); err != nil {
			t.Fatal(err)
		}
		postRecv(t, b, 1, 4096, 2048)
		if _, err := a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendSignaled,
			SGList: []SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		wantWC(t, a.scq, WCLocProtErr, WCSend)
	})
}

// mmapMR registers n bytes of a fresh anonymous mapping, which the test
// may unmap while the MR stays registered.
func mmapMR(t *testing.T, pd *PD, n int, access Access) ([]byte, *MR) {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(m, access)
	if err != nil {
		t.Fatal(err)
	}
	return m, mr
}
