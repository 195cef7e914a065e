// Package rping is the rdma_cm ping tools: "softroce rping", wire- and
// output-compatible with rdma-core's rping, and "softroce krping", the
// kernel's krping test (ping, wlat, rlat, bw) in user space. Its commands
// register themselves with the softroce command table.
package rping

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

// registerCmd adds c to this family's commands and to the softroce
// command's (cli.Register).
func registerCmd(c *cli.Command) {
	registered = append(registered, c)
	cli.Register(c)
}
