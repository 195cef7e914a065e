package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/softroce/softroce/internal/cli"
)

// Shell completion: "softroce completion bash|zsh|fish" prints a script
// that asks the binary itself ("softroce __complete WORDS...") for the
// commands, subcommands and options, so it never goes stale.

const completeCmd = "__complete"

const bashCompletion = `# softroce completion for bash: source it, or save it as
# /etc/bash_completion.d/softroce (zsh: autoload bashcompinit; bashcompinit first).
_softroce() {
	local IFS=$'\n'
	COMPREPLY=( $(softroce __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null) )
}
complete -o default -F _softroce softroce
`

const fishCompletion = `# softroce completion for fish: save as ~/.config/fish/completions/softroce.fish
complete -c softroce -f -a '(softroce __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(stdout, "Usage: softroce completion bash|zsh|fish\n\nPrints a shell completion script, e.g.: source <(softroce completion bash)")
		return cli.ExitOK
	}
	if len(args) != 1 {
		return cli.UsageErr(stderr, "softroce completion", "want one shell: bash, zsh or fish")
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(stdout, bashCompletion)
	case "zsh":
		fmt.Fprint(stdout, "autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion)
	case "fish":
		fmt.Fprint(stdout, fishCompletion)
	default:
		return cli.UsageErr(stderr, "softroce completion", "unknown shell %q: want bash, zsh or fish", args[0])
	}
	return cli.ExitOK
}

// runComplete prints the candidates for the last of words (the word being
// completed; the others precede it), one per line.
func runComplete(words []string, stdout io.Writer) int {
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	var cands []string
	if len(words) == 1 {
		cands = append(commandNames(), "completion", "help", "--version")
	} else if c, ok := commands[words[0]]; ok {
		if !strings.HasPrefix(cur, "-") && len(words) == 2 && len(c.Subs) > 0 {
			cands = c.Subs
		} else if strings.HasPrefix(cur, "-") {
			path := []string{}
			if len(c.Subs) > 0 && len(words) > 2 {
				path = append(path, words[1])
			}
			for _, g := range commandOptions(c, path) {
				for _, o := range g.Opts {
					if o.Refused {
						continue
					}
					if o.Short != 0 {
						cands = append(cands, "-"+string(o.Short))
					}
					if o.Long != "" {
						cands = append(cands, "--"+o.Long)
					}
				}
			}
		}
	} else if words[0] == "completion" && len(words) == 2 {
		cands = []string{"bash", "zsh", "fish"}
	}
	for _, s := range cands {
		if strings.HasPrefix(s, cur) {
			fmt.Fprintln(stdout, s)
		}
	}
	return cli.ExitOK
}

// commandOptions returns the option sets command c (with the subcommand
// path) parses, by running it with --help and nothing else: its -h
// handling reports them to a cli.OptionSets in place of the help.
func commandOptions(c *cli.Command, path []string) []*cli.Getopt {
	var sets cli.OptionSets
	cli.ArgsOnly = true
	defer func() { cli.ArgsOnly = false }()
	c.Run(append(append([]string{}, path...), "--help"), &sets, &sets)
	return sets.Sets
}
