package toolkit

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/softroce/softroce/cm"
)

// CMConfig configures the CM agents of the rdma_cm tools (nil: Linux's
// timing); tests shorten the timers.
var CMConfig *cm.Config

// AgentConfig is the CM configuration of the tools' devices:
// CMConfig, resolving addresses through the kernel's neighbour table
// (rdma_resolve_addr's ARP) unless it says otherwise.
func AgentConfig() *cm.Config {
	var c cm.Config
	if CMConfig != nil {
		c = *CMConfig
	}
	if c.Resolve == nil && NeighResolve != nil {
		c.Resolve, c.Resolved = NeighResolve, NeighResolved
	}
	if c.Logger == nil {
		c.Logger = Logger
	}
	return &c
}

// ListenBacklog is the backlog of an rdma_cm listener asked for with 0 or
// more than this (rdma_listen; the cmtime server's): the rdma_ucm
// module's max_backlog setting if it is loaded, as the kernel's rdma_cm
// file; else 4 × its default of 1,024. With the channel's
// SetBacklogOnTake, as the kernel counts, a request the program has not
// yet taken counts against the backlog, and a MAD becomes an event more
// slowly here than in the kernel: with 1,024, the server of cmtime -c 2000
// fell behind by more (stock cmtime through the library in about one run
// in two, the Go tool every run), and the requests beyond were resent 6 s
// later.
var ListenBacklog = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/proc/sys/net/rdma_ucm/max_backlog"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 4 * 1024
})
