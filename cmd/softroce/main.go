// Command softroce is RDMA over Converged Ethernet v2 in pure Go: device
// info, link management, ping-pong, perftest-style benchmarks, rping, pcap
// capture and PSRDADA tools, each as a subcommand.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers itself
// from an init function with register.
type command struct {
	name    string
	summary string // one line for the command list
	// run executes the command with the arguments after its name. It returns
	// the process exit code; errors are printed by the command itself.
	run func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("softroce: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softroce COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'softroce COMMAND -h' for a command's flags.")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softroce: unknown command %q\n", args[0])
		var near []string
		for n := range commands {
			if strings.HasPrefix(n, args[0][:1]) {
				near = append(near, n)
			}
		}
		sort.Strings(near)
		if len(near) > 0 {
			fmt.Fprintf(stderr, "did you mean one of: %s?\n", strings.Join(near, ", "))
		}
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}
