package verbs

import (
	"runtime"
	"testing"
)

// TestSteadyStateAllocsUDP: a 64 KiB RDMA WRITE over UDP loopback, whose
// MIDDLE packets have their ICRC checked inside the copy into the MR
// (checkLate), allocates nothing on either device.
func TestSteadyStateAllocsUDP(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a run without -race or -short")
	}
	a, b := udpPair(t, pairOpts{})
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 65536), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	wcs := make([]WC, 1)
	write := func() {
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for a.scq.Poll(wcs) == 0 {
			// AllocsPerRun runs on one processor: the test's goroutine
			// receives for both devices, as a polling program does.
			b.dev.PollLink()
			a.dev.PollLink()
			runtime.Gosched()
		}
		if wcs[0].Status != WCSuccess {
			t.Fatalf("WRITE: %v", wcs[0].Status)
		}
	}
	for range 20 {
		write()
	}
	allocs := allocsPerRun(50, write)
	t.Logf("%.2f allocations per 64 KiB RDMA WRITE over UDP", allocs)
	if allocs != 0 {
		t.Errorf("%.2f allocations per 64 KiB WRITE over UDP, want 0", allocs)
	}
	if b.dev.Stats().ICRCErrors.Load() != 0 {
		t.Error("ICRC errors on an intact stream")
	}
}
