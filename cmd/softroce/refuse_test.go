package main

import (
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/tooltest"
)

func TestPingpongRefusesWhatItCannotHonour(t *testing.T) {
	lo, _ := tooltest.LoopPair()
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
