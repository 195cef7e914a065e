// Package dadatool is "softroce dada": PSRDADA ring buffer tools (create,
// destroy, inspect, read and write rings; stream them between hosts over
// RDMA). Commands returns it for the softroce command table.
package dadatool

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the dada command.
func Commands() []*cli.Command { return registered }
