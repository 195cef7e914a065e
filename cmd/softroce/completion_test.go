package main

import (
	"slices"
	"strings"
	"testing"
)

// TestComplete: "softroce __complete" offers a command's options, learned
// from the command's own -h handling (cli.OptionSets), for commands with
// generated help (demo), custom help (rping), help on stderr (dada's
// subcommands) and subcommands (link), and leaves out refused options.
func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		words       []string
		want, never []string
	}{
		{[]string{"demo", "--"}, []string{"--pipe", "--time"}, nil},
		{[]string{"rping", "-"}, []string{"-s", "-c", "-a", "--pcap"}, nil},
		{[]string{"dada", "recv", "-"}, []string{"-k", "--udp"}, nil},
		{[]string{"link", "show", "-"}, []string{"-j", "--json"}, nil},
		{[]string{"rc_pingpong", "-"}, []string{"-n", "--iters"}, []string{"-o", "--odp"}},
	} {
		var out strings.Builder
		if code := runComplete(tc.words, &out); code != 0 {
			t.Fatalf("%q: exit %d", tc.words, code)
		}
		got := strings.Fields(out.String())
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: %q not offered; got %q", tc.words, w, got)
			}
		}
		for _, w := range tc.never {
			if slices.Contains(got, w) {
				t.Errorf("%q: refused option %q offered", tc.words, w)
			}
		}
	}
}
