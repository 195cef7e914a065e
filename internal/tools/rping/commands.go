// Package rping is the rdma_cm ping tools: "softroce rping", wire- and
// output-compatible with rdma-core's rping, and "softroce krping", the
// kernel's krping test (ping, wlat, rlat, bw) in user space. Commands
// returns them for the softroce command table.
package rping

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the rping and krping commands.
func Commands() []*cli.Command { return registered }
