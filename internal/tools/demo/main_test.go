package demo

import (
	"io"

	"github.com/softroce/softroce/internal/cli"
)

// run runs the command line args with this family's commands, as softroce's
// command table does.
func run(args []string, stdout, stderr io.Writer) int {
	for _, c := range registered {
		if c.Name == args[0] {
			return c.Run(args[1:], stdout, stderr)
		}
	}
	return cli.UsageErr(stderr, "softroce", "unknown command %q", args[0])
}
