package devinfo

import (
	"io"

	"github.com/softroce/softroce/internal/cli"
	_ "github.com/softroce/softroce/internal/tools/dump" // its commands, registered
)

// run runs the command line args with this family's commands and link
// (internal/tools/dump), as softroce's command table does.
func run(args []string, stdout, stderr io.Writer) int {
	for _, cs := range [][]*cli.Command{cli.Registered()} {
		for _, c := range cs {
			if c.Name == args[0] {
				return c.Run(args[1:], stdout, stderr)
			}
		}
	}
	return cli.UsageErr(stderr, "softroce", "unknown command %q", args[0])
}
