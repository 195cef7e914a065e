package perftest

import "github.com/softroce/softroce/internal/cli"

// ptCommands are the commands this family registers from init.
var ptCommands []*cli.Command

func registerCmd(c *cli.Command) { ptCommands = append(ptCommands, c) }

// Commands returns the perftest-style commands and the TCP baselines.
func Commands() []*cli.Command { return ptCommands }
