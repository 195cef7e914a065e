package netnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadNetns identifies the network namespace of the calling thread.
func threadNetns(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestPair(t *testing.T) {
	var p *Pair
	// Registered first, so it runs after NewPair's clean-ups.
	t.Cleanup(func() {
		if p == nil {
			return // skipped
		}
		for _, ns := range p.NS {
			if _, err := os.Stat(RunDir + "/" + ns); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("namespace %s still there after the test: %v", ns, err)
			}
		}
	})
	p = NewPair(t, Config{
		Prefix: "nnt",
		IPv4:   [2]string{"10.197.0.1/24", "10.197.0.2/24"},
		IPv6:   [2]string{"fe80::a/64", "fe80::b/64"},
	})
	if p.Addr != [2]string{"10.197.0.1", "10.197.0.2"} {
		t.Errorf("Addr = %q", p.Addr)
	}
	for i, ns := range p.NS {
		if _, err := os.Stat(RunDir + "/" + ns); err != nil {
			t.Fatal(err)
		}
		// Only the configured addresses exist (addrgenmode none).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := Command(ctx, ns, "ip", "-o", "addr", "show", "dev", p.Veth[i]).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		want := []string{[]string{"10.197.0.1/24", "10.197.0.2/24"}[i], []string{"fe80::a/64", "fe80::b/64"}[i]}
		if got := strings.Count(string(out), " inet"); got != 2 {
			t.Errorf("%s has %d addresses, want 2:\n%s", ns, got, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), " "+w+" ") {
				t.Errorf("%s: no %s in\n%s", ns, w, out)
			}
		}
	}

	// A UDP datagram from A to B, sockets opened inside the namespaces.
	before := threadNetns(t)
	var a, b *net.UDPConn
	if err := Do(p.NS[1], func() (err error) {
		if threadNetns(t) == before {
			t.Error("Do did not switch namespaces")
		}
		b, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(p.Addr[1]+":4791")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	Run(t, p.NS[0], func() {
		var err error
		if a, err = net.ListenUDP("udp4", nil); err != nil {
			t.Fatal(err)
		}
	})
	defer a.Close()
	if _, err := a.WriteToUDPAddrPort([]byte("hello"), netip.MustParseAddrPort(p.Addr[1]+":4791")); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := b.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "hello" || from.Addr().String() != p.Addr[0] {
		t.Errorf("read %q from %v, %v; want hello from %s", buf[:n], from, err, p.Addr[0])
	}
}

func TestDoErrors(t *testing.T) {
	Require(t)
	before := threadNetns(t)
	want := errors.New("from f")
	if err := Do("netnstest-none", func() error { return want }); err == nil || errors.Is(err, want) {
		t.Errorf("Do in a missing namespace = %v, want an error before f runs", err)
	}
	p := NewPair(t, Config{Prefix: "nnt"})
	if err := Do(p.NS[0], func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Do = %v, want f's error", err)
	}
	if threadNetns(t) != before {
		t.Error("Do left the thread in the namespace")
	}
}

func TestArgv(t *testing.T) {
	got := Argv("ns1", "softroce", "rc_pingpong", "-d", "10.0.0.1")
	want := "ip netns exec ns1 softroce rc_pingpong -d 10.0.0.1"
	if strings.Join(got, " ") != want {
		t.Errorf("Argv = %q, want %q", got, want)
	}
}
