package capitest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMulticastC runs testdata/mcast.c: UD QPs attached to a group with
// ibv_attach_mcast receive what a QP sends to it, a detached QP and one
// of another group do not, nor does any QP of the device receive from a
// QP made with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, attach/detach errors,
// and the rdma_cm multicast calls' errors and send-only join event.
func TestMulticastC(t *testing.T) {
	runC(t, "mcast.c", 5)
}

// igmpMembers counts the memberships of IPv4 group g in /proc/net/igmp.
func igmpMembers(g string) int {
	b, err := os.ReadFile("/proc/net/igmp")
	if err != nil {
		return 0
	}
	a := netip.MustParseAddr(g).As4()
	want := fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0])
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == want {
			var users int
			fmt.Sscan(f[1], &users)
			n += users
		}
	}
	return n
}

var groupSeq atomic.Uint32

// TestMckey: rdma-core's mckey, unmodified: one sender and two receivers,
// each a process on the library with a loopback address of its own; each
// exits 0 with its normal output. The receivers are waited for until the
// kernel counts both memberships of the group (the sender sends 3 s after
// its own join).
func TestMckey(t *testing.T) {
	needLib(t, "mckey")
	for _, tc := range []struct {
		name           string
		sender, recver string // extra flags; %s is the group
	}{
		{"default", "-m %s", "-m %s"},
		{"50x1000 send-only", "-m %s -o -C 50 -S 1000", "-m %s -C 50 -S 1000"},
		{"unmapped group", "-m %s", "-M ::ffff:%s"},
		// -l: every member's QP is made with rdma_create_qp_ex and
		// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB; the receivers, other
		// processes (other devices), still get the sender's datagrams.
		{"no loopback", "-m %s -l", "-m %s -l"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := groupSeq.Add(1)
			group := fmt.Sprintf("239.60.%d.%d", 100+n/250, n%250+1)
			a1, a2 := addrPair()
			a3, _ := addrPair()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			args := func(f, addr string) []string {
				return append([]string{"mckey"}, append(strings.Fields(fmt.Sprintf(f, group)), "-b", addr)...)
			}
			r1 := start(t, ctx, env(a1), args(tc.recver, a1)...)
			r2 := start(t, ctx, env(a2), args(tc.recver, a2)...)
			waitReady(t, r1, "two members of "+group, func() bool { return igmpMembers(group) >= 2 })
			s := start(t, ctx, env(a3), append(args(tc.sender, a3), "-s")...)
			joined := "mckey: joined dgid: ::ffff:" + group + " mlid 0x0 sl 0\n"
			for _, p := range []*proc{s, r1, r2} {
				err := p.wait()
				out := p.stdout.String()
				if err != nil || !strings.Contains(out, joined) || !strings.Contains(out, "data transfers complete\n") ||
					!strings.HasSuffix(out, "test complete\nreturn status 0\n") {
					t.Errorf("%s", p)
				}
			}
			if n := igmpMembers(group); n != 0 {
				t.Errorf("%d memberships of %s left", n, group)
			}
		})
	}
}
