package pingpong

import "github.com/softroce/softroce/internal/cli"

// pingpongCommands are the commands this family registers from init.
var pingpongCommands []*cli.Command

func registerCmd(c *cli.Command) { pingpongCommands = append(pingpongCommands, c) }

// Commands returns the ibv_*_pingpong commands.
func Commands() []*cli.Command { return pingpongCommands }
