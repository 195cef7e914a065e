package verbs_test

import (
	"fmt"

	"github.com/softroce/softroce/mem"
	"github.com/softroce/softroce/verbs"
)

// Memory of a provider (here the simulated accelerator: device memory that
// is not a Go slice) registered through the device's memory registry, then
// written by the peer and read back through the provider.
func Example_providerMemory() {
	acc, err := mem.NewAccelerator(mem.AcceleratorOptions{Size: 1 << 20})
	if err != nil {
		fmt.Println("no accelerator:", err)
		return
	}
	defer acc.Close()
	p := newExamplePair()
	defer p.close()
	p.devB.MemoryRegistry().Register(acc) // providers are found at run time
	devAddr, _ := acc.Alloc(64 << 10)
	mr, err := p.pdB.RegMem(mem.Request{Addr: devAddr, Length: 64 << 10},
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		panic(err)
	}
	fmt.Println("provider:", mr.Region().Provider(), "MR at device address:", mr.Addr() == devAddr)

	src := []byte("into device memory")
	smr, _ := p.pdA.RegMR(src, 0)
	p.a.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: devAddr + 100, RKey: mr.RKey(),
		SGList: []verbs.SGE{{Addr: smr.Addr(), Length: uint32(len(src)), LKey: smr.LKey()}}}})
	fmt.Println("write:", wait(p.cqA).Status)
	got := make([]byte, len(src))
	acc.CopyFromDevice(got, devAddr+100)
	fmt.Println(string(got))

	// The provider revokes the memory: the MR is invalid at once, the
	// owner gets an async event, the writer a remote access error.
	acc.Revoke(devAddr)
	for ev := range p.devB.AsyncEvents() {
		if ev.Type == verbs.EventMRInvalidated {
			fmt.Println("event:", ev.Type, ev.MR == mr)
			break
		}
	}
	p.a.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: devAddr, RKey: mr.RKey(),
		SGList: []verbs.SGE{{Addr: smr.Addr(), Length: uint32(len(src)), LKey: smr.LKey()}}}})
	fmt.Println("write after revocation:", wait(p.cqA).Status)
	mr.Deregister()
	// Output:
	// provider: accel MR at device address: true
	// write: success
	// into device memory
	// event: MR invalidated by its memory provider true
	// write after revocation: remote access error
}
