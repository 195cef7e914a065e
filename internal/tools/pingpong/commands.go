package pingpong

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the ibv_*_pingpong commands.
func Commands() []*cli.Command { return registered }
