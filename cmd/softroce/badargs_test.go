package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/cli"
)

// runGuarded runs the command line args in process with cli.ArgsOnly set (the
// commands stop after checking their arguments) and turns a panic into a
// test failure.
func runGuarded(t *testing.T, args []string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e strings.Builder
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("softroce %q panicked: %v", args, r)
				code = -1
			}
		}()
		cli.ArgsOnly = true
		defer func() { cli.ArgsOnly = false }()
		code = run(args, &o, &e)
	}()
	return code, o.String(), e.String()
}

// checkUsageLine fails unless stderr is exactly one line that leaks no Go
// internals.
func checkUsageLine(t *testing.T, args []string, stderr string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || len(strings.TrimSpace(stderr)) == 0 {
		t.Errorf("softroce %q: want one line on stderr, got %q", args, stderr)
	}
	for _, bad := range []string{"strconv.", "panic", "goroutine", "invalid syntax", "value out of range"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("softroce %q: stderr leaks %q: %q", args, bad, stderr)
		}
	}
}

// commandPaths lists every command and subcommand of the command table.
func commandPaths() [][]string {
	var paths [][]string
	for _, n := range commandNames() {
		c := commands[n]
		if len(c.Subs) == 0 {
			paths = append(paths, []string{n})
			continue
		}
		for _, s := range c.Subs {
			paths = append(paths, []string{n, s})
		}
	}
	return paths
}

// TestBadArgumentsEveryCommand drives every command and subcommand of the
// command table, and every option each one parses, with zero, negative,
// huge, non-numeric and empty values: never a panic; exit 0 or exit 2
// with one clear line; numbers that are not numbers, or overflow, and
// non-positive durations are usage errors. -h and --help exit 0, an
// unknown option exits 2 with one line.
func TestBadArgumentsEveryCommand(t *testing.T) {
	values := []string{"0", "-1", "-1s", "99999999999999999999", "4G", "x", "", "1e400", "0x", "-0"}
	swept := 0
	for _, path := range commandPaths() {
		name := strings.Join(path, " ")
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, path...), h)
			// (The dada tools print their usage to stderr, as psrdada's do.)
			if code, out, errOut := runGuarded(t, args); code != cli.ExitOK || out+errOut == "" {
				t.Errorf("softroce %s %s: exit %d, stdout %q; want exit 0 and the usage", name, h, code, out)
			}
		}
		args := append(append([]string{}, path...), "--no-such-option")
		code, _, errOut := runGuarded(t, args)
		if code != cli.ExitUsage {
			t.Errorf("softroce %s --no-such-option: exit %d, want 2", name, code)
		}
		checkUsageLine(t, args, errOut)
		sets := commandOptions(commands[path[0]], path[1:])
		if len(sets) == 0 {
			t.Errorf("softroce %s parses no options with the shared grammar", name)
		}
		for _, g := range sets {
			for _, o := range g.Opts {
				spell := fmt.Sprintf("-%c", o.Short)
				if o.Short == 0 {
					spell = "--" + o.Long
				}
				if !o.HasArg {
					if o.Long == "" {
						continue
					}
					args := append(append([]string{}, path...), "--"+o.Long+"=1")
					code, _, errOut := runGuarded(t, args)
					if code != cli.ExitUsage {
						t.Errorf("softroce %q: exit %d, want 2 (a flag takes no value)", args, code)
					}
					checkUsageLine(t, args, errOut)
					continue
				}
				for _, v := range values {
					args := append(append([]string{}, path...), spell, v)
					code, _, errOut := runGuarded(t, args)
					swept++
					switch code {
					case cli.ExitOK:
					case cli.ExitUsage:
						checkUsageLine(t, args, errOut)
					default:
						t.Errorf("softroce %q: exit %d (stderr %q); want 0 or 2", args, code, errOut)
					}
					numeric := o.Kind == cli.KindNum || o.Kind == cli.KindFloat || o.Kind == cli.KindDur
					bad := v == "x" || v == "" || v == "1e400" || v == "0x"
					if o.Kind != cli.KindFloat {
						bad = bad || v == "99999999999999999999"
					}
					if o.Kind == cli.KindDur {
						bad = bad || v == "-1" || v == "-1s" || v == "4G" || !o.ZeroOK && (v == "0" || v == "-0")
					}
					if o.Kind == cli.KindNum {
						bad = bad || v == "-1s" || v == "4G"
					}
					if numeric && bad && code != cli.ExitUsage {
						t.Errorf("softroce %q: exit %d; want 2 (%q is no valid value)", args, code, v)
					}
				}
			}
		}
	}
	if swept < 500 {
		t.Errorf("only %d option values swept: the option sets are not found", swept)
	}
}

// TestBadArgumentsNamed pins the cases the issue names, each of which once
// panicked or was silently accepted.
func TestBadArgumentsNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the one stderr line
	}{
		{[]string{""}, `unknown command ""`},                                                           // slice bounds in main.go
		{[]string{"-x"}, `unknown option "-x"`},                                                        //
		{[]string{"demo", "-time", "0"}, "the duration must be positive"},                              // division by zero
		{[]string{"demo", "-time", "-1s"}, "the duration must be positive"},                            //
		{[]string{"demo", "--time=-1s"}, "the duration must be positive"},                              //
		{[]string{"demo", "-a", "bad"}, `-a "bad": want IP:PORT`},                                      // silently fell back to link/pipe
		{[]string{"krping", "server,addr=127.0.0.1,port=70000"}, "port 70000"},                         // accepted
		{[]string{"write_bw", "-t", "-1"}, "-t/--tx-depth: -1 is out of range"},                        // taken as the default
		{[]string{"read_bw", "-o", "-1"}, "-o/--outs: -1 is out of range"},                             // taken as the default
		{[]string{"write_bw", "-q", "16385"}, "-q/--qp: 16385 is out of range (1..16384)"},             // perftest's MAX_QP_NUM (was 64)
		{[]string{"rping", "-s", "-S", "4G"}, `option -S: "4G" is not a number`},                       // leaked strconv.Atoi
		{[]string{"rc_pingpong", "-n", "99999999999999999999"}, "is out of range"},                     //
		{[]string{"dump", "-r", "f.pcap", "-c", "0"}, "-c: 0 is out of range"},                         //
		{[]string{"write_bw", "-n", "99999999999999999999"}, `"99999999999999999999" is out of range`}, // said "is not a number"
		{[]string{"send_lat", "-s", "99999999999999999999"}, `"99999999999999999999" is out of range`}, //
		{[]string{"krping", "client,addr"}, "option addr needs a value"},                               // getaddrinfo failed
		{[]string{"krping", "client,addr="}, "option addr needs a value"},                              //
	} {
		code, _, errOut := runGuarded(t, tc.args)
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("softroce %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
		checkUsageLine(t, tc.args, errOut)
		if !strings.Contains(errOut, " -h')") {
			t.Errorf("softroce %q: %q lacks cli.UsageErr's \"(see '... -h')\"", tc.args, errOut)
		}
	}
}

// TestUsageErrorsAfterParsing: the usage errors a command finds after
// its options parse (so TestBadArgumentsNamed's args-only run never
// reaches them) are one line with cli.UsageErr's "(see '... -h')" too, exit 2.
func TestUsageErrorsAfterParsing(t *testing.T) {
	t.Setenv("SOFTROCE_STATE", filepath.Join(t.TempDir(), "links.json"))
	for _, tc := range []struct {
		args []string
		want string // in the one stderr line
	}{
		{[]string{"dada", "monitor", "-n", "-1"}, "softroce dada monitor: "},                              // no "(see ... -h)"
		{[]string{"dada", "write", "-k", "c0de"}, "softroce dada write: a header file must be specified"}, //
		{[]string{"dada", "db", "-r", "0"}, "softroce dada db: -r 0"},                                     //
		{[]string{"link", "add", "x", "netdev"}, `softroce link add: "netdev" needs a value`},             //
		{[]string{"tcp_bw", "-D", "4", "-f", "2"}, "softroce tcp_bw: -f 2 leaves no time to measure in -D 4"},
		{[]string{"tcp_bw", "-f", "3"}, "softroce tcp_bw: -f 3 leaves no time to measure in -D 5"},
		{[]string{"tcp_lat", "-f", "1"}, "softroce tcp_lat: tcp_lat has no -D, so no -f"},
	} {
		var o, e strings.Builder
		code := run(tc.args, &o, &e)
		errOut := e.String()
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) || !strings.HasSuffix(errOut, " -h')\n") {
			t.Errorf("softroce %q: exit %d, stderr %q; want 2 and %q with cli.UsageErr's \"(see '... -h')\"", tc.args, code, errOut, tc.want)
		}
		checkUsageLine(t, tc.args, errOut)
	}
}

// TestGrammarOptionsAfterOperands: options after operands apply, in the
// getopt style and in the flag-package style the dada tools keep
// ("dada write -k K obs.hdr -b 100" ignored -b).
func TestGrammarOptionsAfterOperands(t *testing.T) {
	fs := cli.NewFlagSet("softroce dada write")
	key := fs.String("k", "dada", "key")
	b := fs.Int64("b", -1, "bytes")
	hdrLen := fs.Int("hdr-len", 8, "header")
	if err := fs.Parse([]string{"-k", "c0de", "obs.hdr", "-b", "100", "-hdr-len", "16"}); err != nil {
		t.Fatal(err)
	}
	if *key != "c0de" || *b != 100 || *hdrLen != 16 || fs.NArg() != 1 || fs.Arg(0) != "obs.hdr" {
		t.Errorf("k %q b %d hdr-len %d operands %q", *key, *b, *hdrLen, fs.Args())
	}
	// Grouped short flags still work next to single-dash long names.
	fs = cli.NewFlagSet("x")
	v, z := fs.Bool("v", false, ""), fs.Bool("z", false, "")
	if err := fs.Parse([]string{"-vz"}); err != nil || !*v || !*z {
		t.Errorf("-vz: %v %v %v", err, *v, *z)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	var o, e strings.Builder
	if code := run([]string{"--version"}, &o, &e); code != 0 || !strings.HasPrefix(o.String(), "softroce ") || !strings.Contains(o.String(), "go1.") {
		t.Errorf("--version: exit %d, %q", code, o.String())
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"rc_p"}, "rc_pingpong\n"},
		{[]string{"write_bw", "--du"}, "--duration\n"}, // not --dualport (refused)
		{[]string{"dada", "re"}, "read\nrecv\n"},
		{[]string{"dada", "send", "--pc"}, "--pcap\n"},
		{[]string{"dump", "-v"}, "-v\n"},
		{[]string{"completion", "f"}, "fish\n"},
	} {
		o.Reset()
		run(append([]string{completeCmd}, tc.words...), &o, &e)
		if o.String() != tc.want {
			t.Errorf("complete %q: %q, want %q", tc.words, o.String(), tc.want)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		o.Reset()
		if code := run([]string{"completion", sh}, &o, &e); code != 0 || !strings.Contains(o.String(), completeCmd) {
			t.Errorf("completion %s: exit %d %q", sh, code, o.String())
		}
	}
}
