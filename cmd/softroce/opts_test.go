package main

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
		var g getopt
		g.num('n', "iters", &r.N)
		g.num('p', "port", &r.P)
		g.str('d', "ib-dev", &r.D)
		g.str(0, "pcap", &r.Pcap)
		g.flag('e', "events", &r.E)
		g.flag('c', "chk", &r.C)
		g.refuse('o', "odp", false, "on-demand paging")
		ops, err := g.parse(tc.args)
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

func TestPingpongRefusesWhatItCannotHonour(t *testing.T) {
	lo, _ := loopPair()
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"rc_pingpong", "-o"}, "on-demand paging"},
		{[]string{"rc_pingpong", "-t"}, "timestamps"},
		{[]string{"rc_pingpong", "-j"}, "device memory"},
		{[]string{"rc_pingpong", "-g", "-1"}, "GID index is required"},
		{[]string{"ud_pingpong", "-m", "1024"}, "invalid option -- 'm'"},
		{[]string{"rc_pingpong", "-m", "1500"}, "mtu 1500"},
		{[]string{"rc_pingpong", "-i", "2"}, "one port"},
		{[]string{"srq_pingpong", "-q", "8", "-r", "4"}, "rx_depth 4 is too small for 8 QPs"},
		{[]string{"rc_pingpong", "a", "b"}, "one server host at most"},
		{[]string{"write_bw", "-R", "-c", "UC"}, "-R (rdma_cm) supports RC connections only"},
		{[]string{"send_bw", "-b"}, "bidirectional"},
		// A loopback address no other test binds (the device opens UDP 4791 on it).
		{[]string{"rc_pingpong", "-d", lo, "-p", "1", "-g", "0"}, "cannot send from: use the GID of its address " + lo + " (index 1)"},
		{[]string{"write_bw", "-d", lo, "-p", "1", "-x", "7"}, "GID index 7 of " + lo + " is empty"},
	} {
		var o, e strings.Builder
		if code := run(tc.args, &o, &e); code == 0 || !strings.Contains(e.String(), tc.err) {
			t.Errorf("%q: exit %d, stderr %q; want failure mentioning %q", tc.args, code, e.String(), tc.err)
		}
	}
}

// FuzzGetopt: the option parser never panics and either fails or returns
// operands drawn from its input.
func FuzzGetopt(f *testing.F) {
	for _, s := range []string{"-n 5 host", "--iters=5 -ec", "-n", "--", "-- -x", "--pcap f.pcap -c 10.0.0.1", "-n5x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n int
		var d string
		var e bool
		var g getopt
		g.num('n', "iters", &n)
		g.str('d', "ib-dev", &d)
		g.flag('e', "events", &e)
		g.refuse('o', "odp", false, "no")
		args := strings.Fields(s)
		ops, err := g.parse(args)
		if err == nil && len(ops) > len(args) {
			t.Fatalf("%d operands from %d arguments", len(ops), len(args))
		}
	})
}

func TestProgressOnlyOnTerminal(t *testing.T) {
	var b strings.Builder
	c := &ptConfig{duration: 10, iters: 5}
	p := newPtProgress(c, &b)
	if p.on {
		t.Fatal("progress enabled on a pipe/buffer")
	}
	stop := p.run(func() uint64 { return 1 })
	stop()
	p.clear()
	if b.Len() != 0 {
		t.Fatalf("progress wrote %q to a non-terminal", b.String())
	}
}
