package rping

import (
	"io"
	"testing"

	"github.com/softroce/softroce/internal/cli"
	_ "github.com/softroce/softroce/internal/tools/dump" // its commands, registered
	"github.com/softroce/softroce/internal/tooltest"
	_ "github.com/softroce/softroce/tools/perftest" // its commands, registered
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// run runs the command line args with this family's commands and those its
// tests use alongside them (dump, perftest), as softroce's command table does.
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
