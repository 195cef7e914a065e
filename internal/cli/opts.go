// Package cli is the command-line grammar of every softroce command except
// krping's comma-separated option string: a GNU getopt_long work-alike, the
// exit codes (0 success, 1 runtime failure, 2 usage error) and the command
// record each tool family registers.
package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// The grammar of every softroce command except krping's
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
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// OptKind says what an option's argument is (the table test of bad values
// picks its values by kind).
type OptKind int

const (
	KindFlag  OptKind = iota // no argument
	KindCount                // no argument, repeatable (-vv)
	KindStr
	KindNum // integer, strtol(s, NULL, 0) syntax
	KindFloat
	KindDur
)

// Getopt is one command's (or subcommand's) option set.
type Getopt struct {
	Prog     string // "softroce rc_pingpong", for messages
	Opts     []*Gopt
	LongOnly bool // single-dash long names, as getopt_long_only
	InOrder  bool // stop at the first operand (commands with subcommands)
	Synopsis string
	// Usage prints the help; nil: generated from the options.
	Usage    func()
	Out      io.Writer
	Operands []string // operands after Parse
}

// Gopt is one option of a Getopt: its names, argument kind, help and setter.
type Gopt struct {
	Short   byte   // 0: long only
	Long    string // "": short only
	HasArg  bool
	Kind    OptKind
	Meta    string // argument name in the help
	Usage   string // the help text
	Def     string // default shown in the help
	Set     func(arg string) error
	Seen    bool
	ZeroOK  bool // a duration of 0 is allowed (it means "never")
	Refused bool // recognised but not supported (not offered by completion)
}

// ArgsOnly makes commands return ExitOK right after checking their
// arguments, before touching devices, sockets or rings (the table test of
// bad values and shell completion).
var ArgsOnly bool

// Add registers an option with its short and long names; set receives the
// argument (or "" for flags).
func (g *Getopt) Add(short byte, long string, hasArg bool, set func(string) error) *Gopt {
	o := &Gopt{Short: short, Long: long, HasArg: hasArg, Set: set, Kind: KindFlag}
	if hasArg {
		o.Kind = KindStr
	}
	g.Opts = append(g.Opts, o)
	return o
}

// Describe sets the help text of o.
func (o *Gopt) Describe(meta, help string) *Gopt { o.Meta, o.Usage = meta, help; return o }

// Flag registers a flag that sets *p.
func (g *Getopt) Flag(short byte, long string, p *bool) *Gopt {
	return g.Add(short, long, false, func(string) error { *p = true; return nil })
}

// Count registers a repeatable flag (-v, -vv, -vvv) counted in *p.
func (g *Getopt) Count(short byte, long string, p *int) *Gopt {
	o := g.Add(short, long, false, func(string) error { *p++; return nil })
	o.Kind = KindCount
	return o
}

// Str registers a string option stored in *p.
func (g *Getopt) Str(short byte, long string, p *string) *Gopt {
	return g.Add(short, long, true, func(s string) error { *p = s; return nil })
}

// ParseNum parses like strtol(s, NULL, 0): decimal, 0x hex or 0 octal,
// and says what is wrong in words (never strconv's message).
func ParseNum(s string, bits int) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 0, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return v, nil
}

// Num registers an integer option (strtol syntax).
func (g *Getopt) Num(short byte, long string, p *int) *Gopt {
	o := g.Add(short, long, true, func(s string) error {
		v, err := ParseNum(s, strconv.IntSize)
		if err != nil {
			return err
		}
		*p = int(v)
		return nil
	})
	o.Kind = KindNum
	return o
}

// NumIn registers an integer option that must lie in lo..hi.
func (g *Getopt) NumIn(short byte, long string, p *int, lo, hi int) *Gopt {
	o := g.Num(short, long, p)
	set := o.Set
	o.Set = func(s string) error {
		v, err := ParseNum(s, 64)
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

// Dur registers a duration option ("1s", "250ms"); it must be positive.
func (g *Getopt) Dur(short byte, long string, p *time.Duration) *Gopt {
	var o *Gopt
	o = g.Add(short, long, true, func(s string) error {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil && o.ZeroOK && strings.TrimSpace(s) == "0" {
			d, err = 0, nil
		}
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 1s or 250ms)", s)
		}
		if d < 0 || d == 0 && !o.ZeroOK {
			return fmt.Errorf("%q: the duration must be positive", s)
		}
		*p = d
		return nil
	})
	o.Kind = KindDur
	return o
}

// DurOrZero registers a duration option that may be 0 (never).
func (g *Getopt) DurOrZero(short byte, long string, p *time.Duration) *Gopt {
	o := g.Dur(short, long, p)
	o.ZeroOK = true
	return o
}

// Refuse registers an option softroce recognises but cannot honour.
func (g *Getopt) Refuse(short byte, long string, hasArg bool, why string) *Gopt {
	o := g.Add(short, long, hasArg, func(string) error { return ErrRefused{why} })
	o.Refused = true
	return o
}

// ErrRefused is the error of an option softroce recognises but refuses; Why
// says why.
type ErrRefused struct{ Why string }

// Error returns why the option is refused.
func (e ErrRefused) Error() string { return e.Why }

// ErrGetoptHelp is returned by ParseList for -h, --help and -help.
var ErrGetoptHelp = errors.New("help requested")

// Name returns how messages name option o ("-n", "--iters" or "-n/--iters").
func (g *Getopt) Name(o *Gopt) string {
	if o.Long != "" && o.Short != 0 {
		return fmt.Sprintf("-%c/--%s", o.Short, o.Long)
	}
	if o.Long != "" {
		return "--" + o.Long
	}
	return fmt.Sprintf("-%c", o.Short)
}

// ByLong returns the option with the long name, or nil.
func (g *Getopt) ByLong(name string) *Gopt {
	for _, c := range g.Opts {
		if c.Long != "" && c.Long == name {
			return c
		}
	}
	return nil
}

// ParseList applies args and returns the operands.
func (g *Getopt) ParseList(args []string) ([]string, error) {
	var operands []string
	apply := func(o *Gopt, arg string) error {
		o.Seen = true
		if err := o.Set(arg); err != nil {
			var r ErrRefused
			if errors.As(err, &r) {
				return fmt.Errorf("option %s is not supported: %s", g.Name(o), r.Why)
			}
			return fmt.Errorf("option %s: %w", g.Name(o), err)
		}
		return nil
	}
	long := func(i *int, name, val string, hasVal bool, dash string) error {
		o := g.ByLong(name)
		if o == nil {
			return fmt.Errorf("unrecognized option '%s%s'", dash, name)
		}
		if o.HasArg && !hasVal {
			if *i+1 >= len(args) {
				return fmt.Errorf("option '%s%s' requires an argument", dash, name)
			}
			*i++
			val = args[*i]
		} else if !o.HasArg && hasVal {
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
			return nil, ErrGetoptHelp
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			if err := long(&i, name, val, hasVal, "--"); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			if g.LongOnly && len(a) > 2 {
				name, val, hasVal := strings.Cut(a[1:], "=")
				if g.ByLong(name) != nil {
					if err := long(&i, name, val, hasVal, "-"); err != nil {
						return nil, err
					}
					continue
				}
			}
			for j := 1; j < len(a); j++ {
				var o *Gopt
				for _, c := range g.Opts {
					if c.Short == a[j] {
						o = c
					}
				}
				if o == nil {
					if g.LongOnly && len(a) > 2 {
						return nil, fmt.Errorf("unrecognized option '%s'", a)
					}
					return nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				if !o.HasArg {
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
			if g.InOrder {
				return append(operands, args[i:]...), nil
			}
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// UsageErr prints a usage error as one line and returns ExitUsage.
func UsageErr(stderr io.Writer, prog string, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s (see '%s -h')\n", prog, fmt.Sprintf(format, a...), prog)
	return ExitUsage
}

// ParseArgs parses args for the command prog. ok is false when the command
// is done: code is ExitOK after -h (help printed to stdout by help) and
// ExitUsage after a bad option (one line on stderr).
func (g *Getopt) ParseArgs(args []string, stdout, stderr io.Writer, help func(io.Writer)) (ops []string, code int, ok bool) {
	ops, err := g.ParseList(args)
	if errors.Is(err, ErrGetoptHelp) {
		g.Help(stdout, help)
		return nil, ExitOK, false
	}
	if err != nil {
		return nil, UsageErr(stderr, g.Prog, "%v", err), false
	}
	return ops, ExitOK, true
}

// OptionSets learns which options a command parses without running it:
// run the command with -h and an *OptionSets as its stdout and stderr, and
// each option set that meets the -h adds itself to Sets instead of printing
// its help (Getopt.Help). Shell completion and the table test of bad values
// use it.
type OptionSets struct {
	Sets []*Getopt
}

// Write discards p: what a command prints besides its help is not wanted.
func (s *OptionSets) Write(p []byte) (int, error) { return len(p), nil }

// Help answers -h: it prints g's help to w with help (nil: PrintUsage),
// or, when w is an *OptionSets, adds g to it.
func (g *Getopt) Help(w io.Writer, help func(io.Writer)) {
	if s, ok := w.(*OptionSets); ok {
		s.Sets = append(s.Sets, g)
		return
	}
	if help == nil {
		help = g.PrintUsage
	}
	help(w)
}

// PrintUsage prints the generated help: the synopsis and every option.
func (g *Getopt) PrintUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n", g.Prog, g.Synopsis)
	if len(g.Opts) > 0 {
		fmt.Fprintln(w, "\nOptions:")
		g.PrintOptions(w)
	}
}

// PrintOptions lists the options, one style for every command.
func (g *Getopt) PrintOptions(w io.Writer) {
	for _, o := range g.Opts {
		var s string
		switch {
		case o.Short != 0 && o.Long != "":
			s = fmt.Sprintf("-%c, --%s", o.Short, o.Long)
		case o.Short != 0:
			s = fmt.Sprintf("-%c", o.Short)
		default:
			s = "    --" + o.Long
		}
		if o.HasArg {
			meta := o.Meta
			if meta == "" {
				meta = "value"
			}
			if o.Long != "" {
				s += "=<" + meta + ">"
			} else {
				s += " <" + meta + ">"
			}
		}
		help := o.Usage
		if o.Def != "" {
			help += " (default " + o.Def + ")"
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

// NewFlagSet returns a Getopt in getopt_long_only style named prog.
func NewFlagSet(prog string) *Getopt { return &Getopt{Prog: prog, LongOnly: true} }

// OptValue is flag.Value.
type OptValue interface {
	String() string
	Set(string) error
}

// OptFlag is what Visit reports: the name of an option that was set.
type OptFlag struct{ Name string }

// SplitName splits a flag-package style name ("n" or "iters") into a short
// and a long name.
func SplitName(name string) (byte, string) {
	if len(name) == 1 {
		return name[0], ""
	}
	return 0, name
}

// Named registers a flag-package style option (single-dash long names).
func (g *Getopt) Named(name string, hasArg bool, kind OptKind, usage, def string, set func(string) error) {
	s, l := SplitName(name)
	o := g.Add(s, l, hasArg, set)
	o.Kind, o.Usage, o.Def = kind, usage, def
	if hasArg {
		o.Meta = map[OptKind]string{KindNum: "n", KindFloat: "x", KindDur: "duration", KindStr: "value"}[kind]
	}
}

// Var defines an option whose value v parses.
func (g *Getopt) Var(v OptValue, name, usage string) {
	g.Named(name, true, KindStr, usage, v.String(), v.Set)
}

// IntVar defines an integer option.
func (g *Getopt) IntVar(p *int, name string, def int, usage string) {
	*p = def
	g.Named(name, true, KindNum, usage, strconv.Itoa(def), func(s string) error {
		v, err := ParseNum(s, strconv.IntSize)
		*p = int(v)
		return err
	})
}

// Int defines an integer option.
func (g *Getopt) Int(name string, def int, usage string) *int {
	p := new(int)
	g.IntVar(p, name, def, usage)
	return p
}

// Int64 defines a 64-bit integer option.
func (g *Getopt) Int64(name string, def int64, usage string) *int64 {
	p := new(int64)
	*p = def
	g.Named(name, true, KindNum, usage, strconv.FormatInt(def, 10), func(s string) error {
		v, err := ParseNum(s, 64)
		*p = v
		return err
	})
	return p
}

// Uint64Var defines an unsigned integer option.
func (g *Getopt) Uint64Var(p *uint64, name string, def uint64, usage string) {
	*p = def
	g.Named(name, true, KindNum, usage, strconv.FormatUint(def, 10), func(s string) error {
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
func (g *Getopt) Uint64(name string, def uint64, usage string) *uint64 {
	p := new(uint64)
	g.Uint64Var(p, name, def, usage)
	return p
}

// Uint defines an unsigned integer option.
func (g *Getopt) Uint(name string, def uint, usage string) *uint {
	p := new(uint)
	*p = def
	var v uint64
	g.Uint64Var(&v, name, uint64(def), usage)
	o := g.Opts[len(g.Opts)-1]
	set := o.Set
	o.Set = func(s string) error {
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
func (g *Getopt) Float64(name string, def float64, usage string) *float64 {
	p := new(float64)
	*p = def
	g.Named(name, true, KindFloat, usage, strconv.FormatFloat(def, 'g', -1, 64), func(s string) error {
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
func (g *Getopt) BoolVar(p *bool, name string, def bool, usage string) {
	*p = def
	g.Named(name, false, KindFlag, usage, "", func(string) error { *p = true; return nil })
}

// Bool defines a flag.
func (g *Getopt) Bool(name string, def bool, usage string) *bool {
	p := new(bool)
	g.BoolVar(p, name, def, usage)
	return p
}

// StringVar defines a string option.
func (g *Getopt) StringVar(p *string, name, def, usage string) {
	*p = def
	g.Named(name, true, KindStr, usage, strconv.Quote(def), func(s string) error { *p = s; return nil })
	if def == "" {
		g.Opts[len(g.Opts)-1].Def = ""
	}
}

// String defines a string option.
func (g *Getopt) String(name, def, usage string) *string {
	p := new(string)
	g.StringVar(p, name, def, usage)
	return p
}

// DurationVar defines a duration option; it must be positive.
func (g *Getopt) DurationVar(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	s, l := SplitName(name)
	o := g.Dur(s, l, p)
	o.Usage, o.Def, o.Meta = usage, def.String(), "duration"
}

// Duration defines a duration option; it must be positive.
func (g *Getopt) Duration(name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	g.DurationVar(p, name, def, usage)
	return p
}

// Parse parses args (the operands are then Args); it returns
// ErrGetoptHelp for -h.
func (g *Getopt) Parse(args []string) error {
	ops, err := g.ParseList(args)
	g.Operands = ops
	return err
}

// Lookup returns the option named name (a letter or a long name), or nil.
func (g *Getopt) Lookup(name string) *Gopt {
	s, l := SplitName(name)
	for _, o := range g.Opts {
		if l != "" && o.Long == l || l == "" && o.Short == s {
			return o
		}
	}
	return nil
}

// Args returns the operands.
func (g *Getopt) Args() []string { return g.Operands }

// NArg returns the number of operands.
func (g *Getopt) NArg() int { return len(g.Operands) }

// Arg returns operand i, or "".
func (g *Getopt) Arg(i int) string {
	if i < 0 || i >= len(g.Operands) {
		return ""
	}
	return g.Operands[i]
}

// Visit calls fn for every option that was set.
func (g *Getopt) Visit(fn func(*OptFlag)) {
	for _, o := range g.Opts {
		if o.Seen {
			n := o.Long
			if n == "" {
				n = string(o.Short)
			}
			fn(&OptFlag{Name: n})
		}
	}
}

// SetOutput sets where Usage writes.
func (g *Getopt) SetOutput(w io.Writer) { g.Out = w }

// Output returns where Usage writes.
func (g *Getopt) Output() io.Writer { return g.Out }

// PrintDefaults lists the options to Output.
func (g *Getopt) PrintDefaults() { g.PrintOptions(g.Out) }
