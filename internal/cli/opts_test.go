package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGetopt(t *testing.T) {
	type res struct {
		N, P     int
		D, Pcap  string
		E, C     bool
		Operands []string
	}
	for _, tc := range []struct {
		args []string
		want res
		err  string
	}{
		{[]string{"-n", "5", "-d", "rxe0", "host"}, res{N: 5, D: "rxe0", Operands: []string{"host"}}, ""},
		{[]string{"host", "-n5", "--port=0x10", "-ec"}, res{N: 5, P: 16, E: true, C: true, Operands: []string{"host"}}, ""},
		{[]string{"--iters", "7", "--pcap", "f.pcap", "--", "-x"}, res{N: 7, Pcap: "f.pcap", Operands: []string{"-x"}}, ""},
		{[]string{"-ce", "-n"}, res{}, "requires an argument -- 'n'"},
		{[]string{"-z"}, res{}, "invalid option -- 'z'"},
		{[]string{"--nope"}, res{}, "unrecognized option '--nope'"},
		{[]string{"--events=1"}, res{}, "doesn't allow an argument"},
		{[]string{"-n", "ten"}, res{}, `"ten" is not a number`},
		{[]string{"-o"}, res{}, "option -o/--odp is not supported: on-demand paging"},
	} {
		var r res
		var g Getopt
		g.Num('n', "iters", &r.N)
		g.Num('p', "port", &r.P)
		g.Str('d', "ib-dev", &r.D)
		g.Str(0, "pcap", &r.Pcap)
		g.Flag('e', "events", &r.E)
		g.Flag('c', "chk", &r.C)
		g.Refuse('o', "odp", false, "on-demand paging")
		ops, err := g.ParseList(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		r.Operands = ops
		if d := cmp.Diff(tc.want, r); d != "" {
			t.Errorf("%q (-want +got):\n%s", tc.args, d)
		}
	}
}

func FuzzGetopt(f *testing.F) {
	for _, s := range []string{"-n 5 host", "--iters=5 -ec", "-n", "--", "-- -x", "--pcap f.pcap -c 10.0.0.1", "-n5x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n int
		var d string
		var e bool
		var g Getopt
		g.Num('n', "iters", &n)
		g.Str('d', "ib-dev", &d)
		g.Flag('e', "events", &e)
		g.Refuse('o', "odp", false, "no")
		args := strings.Fields(s)
		ops, err := g.ParseList(args)
		if err == nil && len(ops) > len(args) {
			t.Fatalf("%d operands from %d arguments", len(ops), len(args))
		}
	})
}
