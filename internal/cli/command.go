package cli

import (
	"io"
	"slices"
	"sort"
	"sync"
)

// Command is one softroce subcommand; each tool family provides its own.
type Command struct {
	Name    string
	Summary string // one line for the command list
	// Run executes the command with the arguments after its name. It returns
	// the process exit code (ExitOK, ExitFailure or ExitUsage); errors are
	// printed by the command itself.
	Run func(args []string, stdout, stderr io.Writer) int
	// Subs names the subcommands, for completion and the table test of bad values.
	Subs []string
}

// The registry: every tool family registers its commands from its init
// function, and the softroce command takes all of them (Registered), as a
// program takes the database/sql drivers it imports.
var (
	registryMu sync.Mutex
	registry   []*Command
)

// Register adds a tool family's commands to the registry; call it from init.
func Register(cs ...*Command) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry = append(registry, cs...)
}

// Registered returns the registered commands, in the order registered.
func Registered() []*Command {
	registryMu.Lock()
	defer registryMu.Unlock()
	return slices.Clone(registry)
}

// Table is a set of commands by name.
type Table map[string]*Command

// Add adds commands to t; a name already in t panics (a programming error).
func (t Table) Add(cs ...*Command) {
	for _, c := range cs {
		if _, dup := t[c.Name]; dup {
			panic("softroce: duplicate command " + c.Name)
		}
		t[c.Name] = c
	}
}

// Names returns the command names in order.
func (t Table) Names() []string {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
