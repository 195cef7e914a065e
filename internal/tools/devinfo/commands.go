// Package devinfo is "softroce devinfo": device and port attributes in
// ibv_devinfo's layout. Its command registers itself with the softroce
// command table.
package devinfo

import "github.com/softroce/softroce/internal/cli"

// registered are the commands this family registers from init.
var registered []*cli.Command

// registerCmd adds c to this family's commands and to the softroce
// command's (cli.Register).
func registerCmd(c *cli.Command) {
	registered = append(registered, c)
	cli.Register(c)
}
