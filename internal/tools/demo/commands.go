// Package demo is "softroce demo": two devices on loopback running RC
// SEND, WRITE, READ and atomics, then speed against TCP. Its commands register
// themselves with the softroce command table.
package demo

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

// registerCmd adds c to this family's commands and to the softroce
// command's (cli.Register).
func registerCmd(c *cli.Command) {
	registered = append(registered, c)
	cli.Register(c)
}
