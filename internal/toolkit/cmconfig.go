package toolkit

import (
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
