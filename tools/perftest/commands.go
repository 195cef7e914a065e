package perftest

import "github.com/softroce/softroce/internal/cli"

// commands are the commands this family registers from init.
var commands []*cli.Command

func registerCmd(c *cli.Command) { commands = append(commands, c) }

// Commands returns the perftest-style commands and the TCP baselines.
func Commands() []*cli.Command { return commands }
