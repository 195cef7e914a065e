package perftest

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the perftest-style commands and the TCP baselines.
func Commands() []*cli.Command { return registered }
