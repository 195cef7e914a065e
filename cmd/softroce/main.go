// Command softroce is RDMA over Converged Ethernet v2 in pure Go: device
// info, link management, ping-pong, perftest-style benchmarks, rping, pcap
// capture and PSRDADA tools, each as a subcommand.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers itself
// from an init function with register.
type command struct {
	name    string
	summary string // one line for the command list
	// run executes the command with the arguments after its name. It returns
	// the process exit code (exitOK, exitFailure or exitUsage); errors are
	// printed by the command itself.
	run func(args []string, stdout, stderr io.Writer) int
	// subs names the subcommands, for completion and the table test of bad values.
	subs []string
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("softroce: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: softroce COMMAND [options] [args]\n       softroce --version | completion bash|zsh|fish")
	fmt.Fprintln(w, "\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'softroce COMMAND -h' for a command's options. Exit codes: 0 success,\n1 runtime failure, 2 usage error.")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return exitOK
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	case "completion":
		return runCompletion(args[1:], stdout, stderr)
	case completeCmd:
		return runComplete(args[1:], stdout)
	}
	c, ok := commands[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return usageErr(stderr, "softroce", "unknown option %q: options go after the command", args[0])
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
		return usageErr(stderr, "softroce", "unknown command %q%s", args[0], hint)
	}
	return c.run(args[1:], stdout, stderr)
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
