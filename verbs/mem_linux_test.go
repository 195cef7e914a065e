package verbs

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/mem"
)

// TestProviderRegion registers accelerator memory (its own address space,
// reachable only through the provider) as an MR, writes and reads it
// remotely, then revokes it: later remote access fails with REM_ACCESS_ERR
// and the QP goes to ERR (the synchronous invalidation contract).
func TestProviderRegion(t *testing.T) {
	acc, region, devAddr := accelRegion(t)
	// timeout 14: a spurious retry of the READ under load would reach the
	// responder after the revocation and be NAKed there.
	a, b := newPair(t, pairOpts{timeout: 14})
	mr, err := b.pd.RegRegion(region, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != devAddr {
		t.Fatalf("MR address %#x, want the device address %#x", mr.Addr(), devAddr)
	}
	fill(a.buf[:10000], 42)
	postRecv(t, b, 1, 0, 0)
	post(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGList: sge(a, 0, 10000), RemoteAddr: devAddr + 100, RKey: mr.RKey()})
	post(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a, 20000, 10000), RemoteAddr: devAddr + 100, RKey: mr.RKey()})
	for _, wc := range waitWC(t, a.scq, 2, 5*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	waitWC(t, b.rcq, 1, 5*time.Second)
	mustEqual(t, a.buf[20000:30000], a.buf[:10000])
	got := make([]byte, 10000)
	if err := acc.CopyFromDevice(got, devAddr+100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, a.buf[:10000]) {
		t.Fatal("device memory does not hold the written bytes")
	}
	// Revoke: synchronous; afterwards the MR is invalid.
	if err := acc.Revoke(devAddr); err != nil {
		t.Fatal(err)
	}
	if mr.Valid() {
		t.Fatal("MR still valid after the provider revoked its region")
	}
	post(t, a.qp, SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a, 0, 100), RemoteAddr: devAddr, RKey: mr.RKey()})
	if wc := waitWC(t, a.scq, 1, 5*time.Second); wc[0].Status != WCRemAccessErr {
		t.Fatalf("%+v", wc[0])
	}
}

// accelRegion registers 64 KiB of a fresh accelerator provider's memory
// (its own address space, reachable only through the provider) and returns
// the provider, the region and the region's device address. The provider
// closes when the test ends; it skips the test where the provider cannot run.
func accelRegion(t *testing.T) (*mem.Accelerator, *mem.Region, uint64) {
	t.Helper()
	acc, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		t.Skip("accelerator provider unavailable:", err)
	}
	t.Cleanup(func() { acc.Close() })
	reg := mem.NewRegistry(mem.Options{})
	if err := reg.Register(acc); err != nil {
		t.Fatal(err)
	}
	devAddr, err := acc.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	region, err := reg.RegisterMemory(mem.Request{Addr: devAddr, Length: 64 << 10, Write: true})
	if err != nil {
		t.Fatal(err)
	}
	return acc, region, devAddr
}
