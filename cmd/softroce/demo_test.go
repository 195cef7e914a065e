package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	for _, args := range [][]string{{"demo", "-pipe", "-time", "50ms"}, {"demo", "-a", "127.0.0.1:0", "-b", "127.0.0.2:0", "-time", "50ms"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out.String(), errb.String())
		}
		s := out.String()
		for _, want := range []string{"SEND", "RDMA WRITE 1 MiB             ok", "RDMA READ 1 MiB              ok",
			"ATOMIC CMP_AND_SWP           ok", "ATOMIC FETCH_AND_ADD         ok", "bandwidth (1 MiB RDMA WRITE)", "latency (64 B SEND half-RTT)"} {
			if !strings.Contains(s, want) {
				t.Fatalf("%v: output lacks %q:\n%s", args, want, s)
			}
		}
	}
}
