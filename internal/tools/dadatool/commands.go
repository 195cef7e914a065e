// Package dadatool is "softroce dada": PSRDADA ring buffer tools (create,
// destroy, inspect, read and write rings; stream them between hosts over
// RDMA). Its commands register themselves with the softroce command table.
package dadatool

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

// registerCmd adds c to this family's commands and to the softroce
// command's (cli.Register).
func registerCmd(c *cli.Command) {
	registered = append(registered, c)
	cli.Register(c)
}
