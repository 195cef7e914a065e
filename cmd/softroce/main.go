// Command softroce is RDMA over Converged Ethernet v2 in pure Go: device
// info, link management, ping-pong, perftest-style benchmarks, rping, pcap
// capture and PSRDADA tools, each as a subcommand.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"

	// The tool families: each registers its commands (cli.Register).
	_ "github.com/softroce/softroce/internal/tools/cmtime"
	_ "github.com/softroce/softroce/internal/tools/dadatool"
	_ "github.com/softroce/softroce/internal/tools/demo"
	_ "github.com/softroce/softroce/internal/tools/devinfo"
	_ "github.com/softroce/softroce/internal/tools/dump"
	_ "github.com/softroce/softroce/internal/tools/pingpong"
	_ "github.com/softroce/softroce/internal/tools/rping"
	_ "github.com/softroce/softroce/tools/perftest"
)

// commands is the command table: every tool family's commands by name.
var commands = cli.Table{}

func init() { commands.Add(cli.Registered()...) }

func commandNames() []string { return commands.Names() }

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: softroce COMMAND [options] [args]\n       softroce --version | completion bash|zsh|fish")
	fmt.Fprintln(w, "\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun 'softroce COMMAND -h' for a command's options. Exit codes: 0 success,\n1 runtime failure, 2 usage error.")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return cli.ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return cli.ExitOK
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, versionLine())
		return cli.ExitOK
	case "completion":
		return runCompletion(args[1:], stdout, stderr)
	case completeCmd:
		return runComplete(args[1:], stdout)
	}
	c, ok := commands[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return cli.UsageErr(stderr, "softroce", "unknown option %q: options go after the command", args[0])
		}
		var near []string
		if args[0] != "" {
			for _, n := range commandNames() {
				if strings.HasPrefix(n, args[0][:1]) {
					near = append(near, n)
				}
			}
		}
		hint := ""
		if len(near) > 0 {
			hint = "; did you mean one of: " + strings.Join(near, ", ") + "?"
		}
		return cli.UsageErr(stderr, "softroce", "unknown command %q%s", args[0], hint)
	}
	stop, ok := func() {}, true
	if args[0] != "exec" {
		// exec leaves the profiling variables to the program it runs (the C
		// library writes its profile, "%p" per process): a profile timer
		// started here would outlive the exec, and its SIGPROF kill the
		// program.
		stop, ok = startProfiles(stderr)
	}
	if !ok {
		return cli.ExitFailure
	}
	log, err := toolkit.LoggerFromEnv(stderr)
	if err != nil {
		stop()
		fmt.Fprintf(stderr, "softroce: %v\n", err)
		return cli.ExitFailure
	}
	toolkit.Logger = log
	defer stop()
	return c.Run(args[1:], stdout, stderr)
}

// versionLine is "softroce VERSION (REVISION[, modified], DATE) GOVERSION"
// from the build information the Go toolchain embeds.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "softroce (unknown version: no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	line := "softroce " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified {
			rev += ", modified"
		}
		if when != "" {
			rev += ", " + when
		}
		line += " (" + rev + ")"
	}
	return line + " " + bi.GoVersion
}
