package capitest

import (
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/netnstest"
)

// TestCMAddressUnanswered: stock rping through the library, toward an
// on-link address nobody answers (its ARP request goes unanswered), ends
// as over the kernel's rdma_cm: RDMA_CM_EVENT_ADDR_ERROR with status -110
// (ETIMEDOUT) once rping's 2000 ms resolve timeout runs out, and a non-zero
// exit. Measured on the kernel peer (rxe, rdma-core 44): the same event and
// status. Runs in a network namespace of its own (root).
func TestCMAddressUnanswered(t *testing.T) {
	needLib(t, "rping")
	p := netnstest.NewPair(t, netnstest.Config{Prefix: "srua", IPv4: [2]string{"10.199.7.1/24", ""}, Loopback: true})
	ctx, cancel := contextWithTimeout(t, 60*time.Second)
	defer cancel()
	begin := time.Now()
	c := start(t, ctx, env(p.Addr[0]), netnstest.Argv(p.NS[0], "rping", "-c", "-a", "10.199.7.99", "-C", "1")...)
	err := c.wait()
	took := time.Since(begin)
	out := c.stdout.String() + c.stderr.String()
	if err == nil {
		t.Fatalf("rping exited 0 toward an address nobody answers:\n%s", c)
	}
	if !strings.Contains(out, "RDMA_CM_EVENT_ADDR_ERROR, error -110") {
		t.Fatalf("want RDMA_CM_EVENT_ADDR_ERROR with error -110:\n%s", c)
	}
	if took < 1500*time.Millisecond || took > 15*time.Second {
		t.Errorf("rping gave up after %v: want about its 2 s resolve timeout", took)
	}
	t.Logf("ADDR_ERROR -110 after %v", took.Round(time.Millisecond))
}
