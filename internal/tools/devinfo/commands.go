// Package devinfo is "softroce devinfo": device and port attributes in
// ibv_devinfo's layout. Commands returns it for the softroce command table.
package devinfo

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

func registerCmd(c *cli.Command) { registered = append(registered, c) }

// Commands returns the devinfo command.
func Commands() []*cli.Command { return registered }
