package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// The command-line grammar of every softroce command except krping's
// comma-separated option string (krping's real interface): a GNU
// getopt_long work-alike. "-n 5", "-n5", "--iters=5", "--iters 5", grouped
// short flags ("-vx"), operands anywhere (permuted to the end unless the
// command has subcommands), "--" ending the options, and -h/--help.
// Commands that used Go's flag package keep their single-dash long names
// ("-time 1s", "-hdr-len 8") as getopt_long_only does, and get them as
// "--time" too.
//
// Exit codes, the same for every command: 0 success (and -h), 1 a runtime
// failure, 2 a usage error (one line on stderr naming what was wrong).
// Exception: rping and krping exit 255 after a failed run, as rdma-core's
// rping (its -1 & 0xff), so their runtime failure is 255, not 1.

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// optKind says what an option's argument is (the table test of bad values
// picks its values by kind).
type optKind int

const (
	kindFlag  optKind = iota // no argument
	kindCount                // no argument, repeatable (-vv)
	kindStr
	kindNum // integer, strtol(s, NULL, 0) syntax
	kindFloat
	kindDur
)

// getopt is one command's (or subcommand's) option set.
type getopt struct {
	prog     string // "softroce rc_pingpong", for messages
	opts     []*gopt
	longOnly bool // single-dash long names, as getopt_long_only
	inOrder  bool // stop at the first operand (commands with subcommands)
	synopsis string
	// Usage prints the help; nil: generated from the options.
	Usage func()
	out   io.Writer
	args  []string // operands after Parse
}

type gopt struct {
	short   byte   // 0: long only
	long    string // "": short only
	hasArg  bool
	kind    optKind
	meta    string // argument name in the help
	Usage   string // the help text
	def     string // default shown in the help
	set     func(arg string) error
	seen    bool
	zeroOK  bool // a duration of 0 is allowed (it means "never")
	refused bool // recognised but not supported (not offered by completion)
}

// parseHook, when set (tests, completion), sees every option set as it parses.
var parseHook func(g *getopt)

// argsOnly makes commands return exitOK right after checking their
// arguments, before touching devices, sockets or rings (the table test of
// bad values and shell completion).
var argsOnly bool

func (g *getopt) add(short byte, long string, hasArg bool, set func(string) error) *gopt {
	o := &gopt{short: short, long: long, hasArg: hasArg, set: set, kind: kindFlag}
	if hasArg {
		o.kind = kindStr
	}
	g.opts = append(g.opts, o)
	return o
}

// describe sets the help text of o.
func (o *gopt) describe(meta, help string) *gopt { o.meta, o.Usage = meta, help; return o }

func (g *getopt) flag(short byte, long string, p *bool) *gopt {
	return g.add(short, long, false, func(string) error { *p = true; return nil })
}

// count registers a repeatable flag (-v, -vv, -vvv) counted in *p.
func (g *getopt) count(short byte, long string, p *int) *gopt {
	o := g.add(short, long, false, func(string) error { *p++; return nil })
	o.kind = kindCount
	return o
}

func (g *getopt) str(short byte, long string, p *string) *gopt {
	return g.add(short, long, true, func(s string) error { *p = s; return nil })
}

// parseNum parses like strtol(s, NULL, 0): decimal, 0x hex or 0 octal,
// and says what is wrong in words (never strconv's message).
func parseNum(s string, bits int) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 0, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return v, nil
}

// num registers an integer option (strtol syntax).
func (g *getopt) num(short byte, long string, p *int) *gopt {
	o := g.add(short, long, true, func(s string) error {
		v, err := parseNum(s, strconv.IntSize)
		if err != nil {
			return err
		}
		*p = int(v)
		return nil
	})
	o.kind = kindNum
	return o
}

// numIn registers an integer option that must lie in lo..hi.
func (g *getopt) numIn(short byte, long string, p *int, lo, hi int) *gopt {
	o := g.num(short, long, p)
	set := o.set
	o.set = func(s string) error {
		v, err := parseNum(s, 64)
		if err != nil {
			return err
		}
		if v < int64(lo) || v > int64(hi) {
			return fmt.Errorf("%s is out of range (%d..%d)", strings.TrimSpace(s), lo, hi)
		}
		return set(s)
	}
	return o
}

// dur registers a duration option ("1s", "250ms"); it must be positive.
func (g *getopt) dur(short byte, long string, p *time.Duration) *gopt {
	var o *gopt
	o = g.add(short, long, true, func(s string) error {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil && o.zeroOK && strings.TrimSpace(s) == "0" {
			d, err = 0, nil
		}
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 1s or 250ms)", s)
		}
		if d < 0 || d == 0 && !o.zeroOK {
			return fmt.Errorf("%q: the duration must be positive", s)
		}
		*p = d
		return nil
	})
	o.kind = kindDur
	return o
}

// durOrZero registers a duration option that may be 0 (never).
func (g *getopt) durOrZero(short byte, long string, p *time.Duration) *gopt {
	o := g.dur(short, long, p)
	o.zeroOK = true
	return o
}

// refuse registers an option softroce recognises but cannot honour.
func (g *getopt) refuse(short byte, long string, hasArg bool, why string) *gopt {
	o := g.add(short, long, hasArg, func(string) error { return errRefused{why} })
	o.refused = true
	return o
}

type errRefused struct{ why string }

func (e errRefused) Error() string { return e.why }

// errGetoptHelp is returned by parse for -h, --help and -help.
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

func (g *getopt) byLong(name string) *gopt {
	for _, c := range g.opts {
		if c.long != "" && c.long == name {
			return c
		}
	}
	return nil
}

// parse applies args and returns the operands.
func (g *getopt) parse(args []string) ([]string, error) {
	if parseHook != nil {
		parseHook(g)
	}
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
	long := func(i *int, name, val string, hasVal bool, dash string) error {
		o := g.byLong(name)
		if o == nil {
			return fmt.Errorf("unrecognized option '%s%s'", dash, name)
		}
		if o.hasArg && !hasVal {
			if *i+1 >= len(args) {
				return fmt.Errorf("option '%s%s' requires an argument", dash, name)
			}
			*i++
			val = args[*i]
		} else if !o.hasArg && hasVal {
			return fmt.Errorf("option '%s%s' doesn't allow an argument", dash, name)
		}
		return apply(o, val)
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
			if err := long(&i, name, val, hasVal, "--"); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			if g.longOnly && len(a) > 2 {
				name, val, hasVal := strings.Cut(a[1:], "=")
				if g.byLong(name) != nil {
					if err := long(&i, name, val, hasVal, "-"); err != nil {
						return nil, err
					}
					continue
				}
			}
			for j := 1; j < len(a); j++ {
				var o *gopt
				for _, c := range g.opts {
					if c.short == a[j] {
						o = c
					}
				}
				if o == nil {
					if g.longOnly && len(a) > 2 {
						return nil, fmt.Errorf("unrecognized option '%s'", a)
					}
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
			if g.inOrder {
				return append(operands, args[i:]...), nil
			}
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// usageErr prints a usage error as one line and returns exitUsage.
func usageErr(stderr io.Writer, prog string, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s (see '%s -h')\n", prog, fmt.Sprintf(format, a...), prog)
	return exitUsage
}

// parseArgs parses args for the command prog. ok is false when the command
// is done: code is exitOK after -h (help printed to stdout by help) and
// exitUsage after a bad option (one line on stderr).
func (g *getopt) parseArgs(args []string, stdout, stderr io.Writer, help func(io.Writer)) (ops []string, code int, ok bool) {
	ops, err := g.parse(args)
	if errors.Is(err, errGetoptHelp) {
		if help == nil {
			help = g.printUsage
		}
		help(stdout)
		return nil, exitOK, false
	}
	if err != nil {
		return nil, usageErr(stderr, g.prog, "%v", err), false
	}
	return ops, exitOK, true
}

// printUsage prints the generated help: the synopsis and every option.
func (g *getopt) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n", g.prog, g.synopsis)
	if len(g.opts) > 0 {
		fmt.Fprintln(w, "\nOptions:")
		g.printOptions(w)
	}
}

// printOptions lists the options, one style for every command.
func (g *getopt) printOptions(w io.Writer) {
	for _, o := range g.opts {
		var s string
		switch {
		case o.short != 0 && o.long != "":
			s = fmt.Sprintf("-%c, --%s", o.short, o.long)
		case o.short != 0:
			s = fmt.Sprintf("-%c", o.short)
		default:
			s = "    --" + o.long
		}
		if o.hasArg {
			meta := o.meta
			if meta == "" {
				meta = "value"
			}
			if o.long != "" {
				s += "=<" + meta + ">"
			} else {
				s += " <" + meta + ">"
			}
		}
		help := o.Usage
		if o.def != "" {
			help += " (default " + o.def + ")"
		}
		if len(s) < 24 {
			fmt.Fprintf(w, "  %-24s %s\n", s, help)
		} else {
			fmt.Fprintf(w, "  %s\n  %-24s %s\n", s, "", help)
		}
	}
}

// The flag.FlagSet-shaped methods below let the commands written against
// Go's flag package (the dada tools) use this grammar with the same calls.

// newFlagSet returns a getopt in getopt_long_only style named prog.
func newFlagSet(prog string) *getopt { return &getopt{prog: prog, longOnly: true} }

// optValue is flag.Value.
type optValue interface {
	String() string
	Set(string) error
}

// optFlag is what Visit reports: the name of an option that was set.
type optFlag struct{ Name string }

func splitName(name string) (byte, string) {
	if len(name) == 1 {
		return name[0], ""
	}
	return 0, name
}

func (g *getopt) named(name string, hasArg bool, kind optKind, usage, def string, set func(string) error) {
	s, l := splitName(name)
	o := g.add(s, l, hasArg, set)
	o.kind, o.Usage, o.def = kind, usage, def
	if hasArg {
		o.meta = map[optKind]string{kindNum: "n", kindFloat: "x", kindDur: "duration", kindStr: "value"}[kind]
	}
}

// Var defines an option whose value v parses.
func (g *getopt) Var(v optValue, name, usage string) {
	g.named(name, true, kindStr, usage, v.String(), v.Set)
}

// IntVar defines an integer option.
func (g *getopt) IntVar(p *int, name string, def int, usage string) {
	*p = def
	g.named(name, true, kindNum, usage, strconv.Itoa(def), func(s string) error {
		v, err := parseNum(s, strconv.IntSize)
		*p = int(v)
		return err
	})
}

// Int defines an integer option.
func (g *getopt) Int(name string, def int, usage string) *int {
	p := new(int)
	g.IntVar(p, name, def, usage)
	return p
}

// Int64 defines a 64-bit integer option.
func (g *getopt) Int64(name string, def int64, usage string) *int64 {
	p := new(int64)
	*p = def
	g.named(name, true, kindNum, usage, strconv.FormatInt(def, 10), func(s string) error {
		v, err := parseNum(s, 64)
		*p = v
		return err
	})
	return p
}

// Uint64Var defines an unsigned integer option.
func (g *getopt) Uint64Var(p *uint64, name string, def uint64, usage string) {
	*p = def
	g.named(name, true, kindNum, usage, strconv.FormatUint(def, 10), func(s string) error {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("%q is out of range", s)
		}
		if err != nil {
			return fmt.Errorf("%q is not a non-negative number", s)
		}
		*p = v
		return nil
	})
}

// Uint64 defines an unsigned integer option.
func (g *getopt) Uint64(name string, def uint64, usage string) *uint64 {
	p := new(uint64)
	g.Uint64Var(p, name, def, usage)
	return p
}

// Uint defines an unsigned integer option.
func (g *getopt) Uint(name string, def uint, usage string) *uint {
	p := new(uint)
	*p = def
	var v uint64
	g.Uint64Var(&v, name, uint64(def), usage)
	o := g.opts[len(g.opts)-1]
	set := o.set
	o.set = func(s string) error {
		if err := set(s); err != nil {
			return err
		}
		if v > math.MaxUint32 && strconv.IntSize == 32 {
			return fmt.Errorf("%q is out of range", s)
		}
		*p = uint(v)
		return nil
	}
	return p
}

// Float64 defines a floating-point option (finite values only).
func (g *getopt) Float64(name string, def float64, usage string) *float64 {
	p := new(float64)
	*p = def
	g.named(name, true, kindFloat, usage, strconv.FormatFloat(def, 'g', -1, 64), func(s string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("%q is not a number", s)
		}
		*p = v
		return nil
	})
	return p
}

// BoolVar defines a flag.
func (g *getopt) BoolVar(p *bool, name string, def bool, usage string) {
	*p = def
	g.named(name, false, kindFlag, usage, "", func(string) error { *p = true; return nil })
}

// Bool defines a flag.
func (g *getopt) Bool(name string, def bool, usage string) *bool {
	p := new(bool)
	g.BoolVar(p, name, def, usage)
	return p
}

// StringVar defines a string option.
func (g *getopt) StringVar(p *string, name, def, usage string) {
	*p = def
	g.named(name, true, kindStr, usage, strconv.Quote(def), func(s string) error { *p = s; return nil })
	if def == "" {
		g.opts[len(g.opts)-1].def = ""
	}
}

// String defines a string option.
func (g *getopt) String(name, def, usage string) *string {
	p := new(string)
	g.StringVar(p, name, def, usage)
	return p
}

// DurationVar defines a duration option; it must be positive.
func (g *getopt) DurationVar(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	s, l := splitName(name)
	o := g.dur(s, l, p)
	o.Usage, o.def, o.meta = usage, def.String(), "duration"
}

// Duration defines a duration option; it must be positive.
func (g *getopt) Duration(name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	g.DurationVar(p, name, def, usage)
	return p
}

// Parse parses args (the operands are then Args); it returns
// errGetoptHelp for -h.
func (g *getopt) Parse(args []string) error {
	ops, err := g.parse(args)
	g.args = ops
	return err
}

// Lookup returns the option named name (a letter or a long name), or nil.
func (g *getopt) Lookup(name string) *gopt {
	s, l := splitName(name)
	for _, o := range g.opts {
		if l != "" && o.long == l || l == "" && o.short == s {
			return o
		}
	}
	return nil
}

// Args returns the operands.
func (g *getopt) Args() []string { return g.args }

// NArg returns the number of operands.
func (g *getopt) NArg() int { return len(g.args) }

// Arg returns operand i, or "".
func (g *getopt) Arg(i int) string {
	if i < 0 || i >= len(g.args) {
		return ""
	}
	return g.args[i]
}

// Visit calls fn for every option that was set.
func (g *getopt) Visit(fn func(*optFlag)) {
	for _, o := range g.opts {
		if o.seen {
			n := o.long
			if n == "" {
				n = string(o.short)
			}
			fn(&optFlag{Name: n})
		}
	}
}

// SetOutput sets where Usage writes.
func (g *getopt) SetOutput(w io.Writer) { g.out = w }

// Output returns where Usage writes.
func (g *getopt) Output() io.Writer { return g.out }

// PrintDefaults lists the options to Output.
func (g *getopt) PrintDefaults() { g.printOptions(g.out) }
