package verbs

import (
	"fmt"
	"testing"
)

func TestWCOpcodeString(t *testing.T) {
	for op, want := range map[WCOpcode]string{
		WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ", WCCompSwap: "COMP_SWAP",
		WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV", WCTSO: "TSO",
		WCFlush: "FLUSH", WCAtomicWrite: "ATOMIC_WRITE", WCRecv: "RECV", WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
		10: "WCOpcode(10)", 130: "WCOpcode(130)",
	} {
		if got := op.String(); got != want {
			t.Errorf("WCOpcode(%d).String() = %q, want %q", uint8(op), got, want)
		}
		if got := fmt.Sprint(op); got != want {
			t.Errorf("fmt.Sprint(WCOpcode(%d)) = %q, want %q", uint8(op), got, want)
		}
	}
}
