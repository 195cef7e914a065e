package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// getopt is a small GNU getopt_long work-alike for the tools that mimic C
// programs: "-n 5", "-n5", "--iters=5", "--iters 5", grouped boolean short
// options ("-ec"), operands anywhere (permuted to the end) and "--" ending
// the options.
type getopt struct {
	opts []*gopt
}

type gopt struct {
	short  byte   // 0: long only
	long   string // "": short only
	hasArg bool
	set    func(arg string) error
	seen   bool
}

func (g *getopt) add(short byte, long string, hasArg bool, set func(string) error) *gopt {
	o := &gopt{short: short, long: long, hasArg: hasArg, set: set}
	g.opts = append(g.opts, o)
	return o
}

func (g *getopt) flag(short byte, long string, p *bool) *gopt {
	return g.add(short, long, false, func(string) error { *p = true; return nil })
}

func (g *getopt) str(short byte, long string, p *string) *gopt {
	return g.add(short, long, true, func(s string) error { *p = s; return nil })
}

// num parses like strtol(s, NULL, 0): decimal, 0x hex or 0 octal.
func (g *getopt) num(short byte, long string, p *int) *gopt {
	return g.add(short, long, true, func(s string) error {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*p = int(v)
		return nil
	})
}

// refuse registers an option softroce recognises but cannot honour.
func (g *getopt) refuse(short byte, long string, hasArg bool, why string) *gopt {
	return g.add(short, long, hasArg, func(string) error { return errRefused{why} })
}

type errRefused struct{ why string }

func (e errRefused) Error() string { return e.why }

var errGetoptHelp = errors.New("help requested")

func (g *getopt) name(o *gopt) string {
	if o.long != "" && o.short != 0 {
		return fmt.Sprintf("-%c/--%s", o.short, o.long)
	}
	if o.long != "" {
		return "--" + o.long
	}
	return fmt.Sprintf("-%c", o.short)
}

// parse applies args and returns the operands.
func (g *getopt) parse(args []string) ([]string, error) {
	var operands []string
	apply := func(o *gopt, arg string) error {
		o.seen = true
		if err := o.set(arg); err != nil {
			var r errRefused
			if errors.As(err, &r) {
				return fmt.Errorf("option %s is not supported: %s", g.name(o), r.why)
			}
			return fmt.Errorf("option %s: %w", g.name(o), err)
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(operands, args[i+1:]...), nil
		case a == "-h" || a == "--help" || a == "-help":
			return nil, errGetoptHelp
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			var o *gopt
			for _, c := range g.opts {
				if c.long == name {
					o = c
				}
			}
			if o == nil {
				return nil, fmt.Errorf("unrecognized option '--%s'", name)
			}
			if o.hasArg && !hasVal {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("option '--%s' requires an argument", name)
				}
				i++
				val = args[i]
			} else if !o.hasArg && hasVal {
				return nil, fmt.Errorf("option '--%s' doesn't allow an argument", name)
			}
			if err := apply(o, val); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				var o *gopt
				for _, c := range g.opts {
					if c.short == a[j] {
						o = c
					}
				}
				if o == nil {
					return nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				if !o.hasArg {
					if err := apply(o, ""); err != nil {
						return nil, err
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option requires an argument -- '%c'", a[j])
					}
					i++
					val = args[i]
				}
				if err := apply(o, val); err != nil {
					return nil, err
				}
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// errConnRefused matches a TCP connection refused (the server is not listening yet).
var errConnRefused error = syscall.ECONNREFUSED
