// Package demo is "softroce demo": two devices on loopback running RC
// SEND, WRITE, READ and atomics, then speed against TCP. Commands returns it
// for the softroce command table.
package demo

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the demo command.
func Commands() []*cli.Command { return registered }
