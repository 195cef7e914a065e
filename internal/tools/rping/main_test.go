package rping

import (
	"io"
	"testing"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/tools/dump"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/tools/perftest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// run runs the command line args with this family's commands and those its
// tests use alongside them (dump, perftest), as softroce's command table does.
func run(args []string, stdout, stderr io.Writer) int {
	for _, cs := range [][]*cli.Command{Commands(), dump.Commands(), perftest.Commands()} {
		for _, c := range cs {
			if c.Name == args[0] {
				return c.Run(args[1:], stdout, stderr)
			}
		}
	}
	return cli.UsageErr(stderr, "softroce", "unknown command %q", args[0])
}
