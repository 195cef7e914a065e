package capitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbs"
)

// resultLine matches rstream's and riostream's result: name, size,
// transfers, iterations, total, time, Gb/sec, usec/xfer.
var resultLine = regexp.MustCompile(`(?m)^\S+ +[0-9.]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+s +[0-9.]+ +[0-9.]+$`)

// TestRsocketTools: rdma-core's rstream (bandwidth and latency, the
// non-blocking default, blocking, rpoll-driven spinning and waiting, data
// verified, keepalive)
// and riostream (riomap/riowrite), unmodified, in pairs over the library.
func TestRsocketTools(t *testing.T) {
	needLib(t, "rstream", "riostream")
	for _, args := range []string{
		"rstream -S 1048576 -C 100",
		"rstream -S 64 -I 1000 -C 1",
		"rstream -T b -S 65536 -C 200",
		"rstream -T a -S 4096 -C 500",
		"rstream -T a -T b -S 4096 -C 500 -T v", // rpoll waiting (no timeout) on one rsocket
		"rstream -T v -S 100000 -C 50",
		"rstream -T v -T b -S 3000 -C 200 -B 8192",
		"rstream -k 1 -S 4096 -C 100",
		"riostream -S 65536 -C 100",
		"riostream -T v -S 100000 -C 20",
		"riostream -S 64 -I 500 -C 1",
	} {
		t.Run(args, func(t *testing.T) {
			sa, ca := addrPair()
			port := itoa(freePort(t))
			f := strings.Fields(args)
			s := append([]string{f[0], "-b", sa, "-p", port}, f[1:]...)
			c := append([]string{f[0], "-s", sa, "-p", port}, f[1:]...)
			sp, cp := runCMPair(t, sa, side{s, env(sa)}, side{c, env(ca)}, 90*time.Second)
			for _, p := range []*proc{sp, cp} {
				if !resultLine.MatchString(p.stdout.String()) {
					t.Errorf("no result line:\n%s", p)
				}
			}
		})
	}
}

// TestRcopy: rcopy copies a file over an rsocket; the copy is compared.
func TestRcopy(t *testing.T) {
	needLib(t, "rcopy")
	for _, size := range []int{1, 100000, 3 << 20} { // rcopy cannot mmap an empty file
		t.Run(itoa(size), func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			data := make([]byte, size)
			rand.Read(data)
			if err := os.WriteFile(src, data, 0o644); err != nil {
				t.Fatal(err)
			}
			sa, ca := addrPair()
			port := itoa(freePort(t))
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			sp := start(t, ctx, env(sa), "rcopy", "-p", port)
			defer func() { sp.cmd.Process.Kill(); sp.wait() }() // it serves until killed
			waitUDP(t, sa, sp)
			cp := start(t, ctx, env(ca), "rcopy", src, sa+":"+dst, "-p", port)
			if err := cp.wait(); err != nil || !strings.Contains(cp.stdout.String(), "done") {
				t.Fatalf("client %s\nserver %s", cp, sp)
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("copy differs (%d bytes, want %d; %v)\nclient %s\nserver %s", len(got), len(data), err, cp, sp)
			}
		})
	}
}

// goRstream plays rstream's custom test with -S size -C count over a Go
// rsocket: the 16-byte sync exchange, then count transfers each way, the
// client sending first.
func goRstream(c *rsocket.Conn, client bool, size, count int) error {
	buf := make([]byte, size*count)
	sync := make([]byte, 16)
	steps := []func() error{
		func() error { _, err := c.Write(sync); return err },
		func() error { _, err := io.ReadFull(c, sync); return err },
		func() error { _, err := c.Write(buf); return err },
		func() error { _, err := io.ReadFull(c, buf); return err },
	}
	if !client {
		steps[0], steps[1], steps[2], steps[3] = steps[1], steps[0], steps[3], steps[2]
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// goDevice opens a Go device on a loopback address with its CM.
func goDevice(t *testing.T, addr string) *cm.Agent {
	t.Helper()
	d, err := verbs.OpenUDP(addr+":4791", &verbs.Config{Name: "go"})
	if err != nil {
		t.Skipf("cannot open a UDP device on %s: %v", addr, err)
	}
	a, err := cm.Attach(d, nil)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); d.Close() })
	return a
}

// TestCrossedRsocket: stock rstream against package rsocket in this
// process, both roles.
func TestCrossedRsocket(t *testing.T) {
	needLib(t, "rstream")
	const size, count = 65536, 50
	for _, stockServes := range []bool{true, false} {
		t.Run(fmt.Sprint("stock serves ", stockServes), func(t *testing.T) {
			sa, ca := addrPair()
			port := freePort(t)
			args := []string{"-p", itoa(port), "-S", itoa(size), "-C", itoa(count)}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			if stockServes {
				a := goDevice(t, ca)
				sp := start(t, ctx, env(sa), append([]string{"rstream", "-b", sa}, args...)...)
				waitUDP(t, sa, sp)
				var c *rsocket.Conn
				var err error
				for try := 0; try < 5; try++ {
					if c, err = rsocket.DialAgent(ctx, a, netip.AddrPortFrom(netip.MustParseAddr(sa), uint16(port)).String(), nil); err == nil {
						break
					}
					time.Sleep(300 * time.Millisecond) // a request before the listen: again
				}
				if err != nil {
					t.Fatalf("dial: %v\nserver %s", err, sp)
				}
				if err := goRstream(c, true, size, count); err != nil {
					t.Fatalf("go client: %v\nserver %s", err, sp)
				}
				c.Close()
				if err := sp.wait(); err != nil || !resultLine.MatchString(sp.stdout.String()) {
					t.Fatalf("server %s", sp)
				}
				return
			}
			a := goDevice(t, sa)
			l, err := rsocket.ListenAgent(a, sa+":"+itoa(port), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cp := start(t, ctx, env(ca), append([]string{"rstream", "-s", sa}, args...)...)
			c, err := l.AcceptRS(ctx)
			if err != nil {
				t.Fatalf("accept: %v\nclient %s", err, cp)
			}
			if err := goRstream(c, false, size, count); err != nil {
				t.Fatalf("go server: %v\nclient %s", err, cp)
			}
			if err := cp.wait(); err != nil || !resultLine.MatchString(cp.stdout.String()) {
				t.Fatalf("client %s", cp)
			}
			c.Close()
		})
	}
}

// TestRsocketDgram runs testdata/rsocket_dgram.c: a pair of datagram
// rsockets in one process (the first datagram over UDP, the rest over UD,
// each reported from its sender's address), rsendmsg and rwritev gathering
// their vectors into one datagram, rrecvmsg naming its source, EMSGSIZE,
// EINVAL before an
// address, and datagrams to a port with no rsocket (sent without an
// error, lost: EAGAIN, rpoll times out in its time).
func TestRsocketDgram(t *testing.T) {
	runC(t, "rsocket_dgram.c", 5)
}

// udpongResult matches udpong's result: name, size, transfers, total,
// time, Gb/sec, usec/xfer.
var udpongResult = regexp.MustCompile(`(?m)^\S+ +[0-9.]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+[kmg]? +[0-9.]+s +[0-9.]+ +[0-9.]+$`)

// TestUdpong: rdma-core's udpong, unmodified, in pairs over the library's
// datagram rsockets: its bandwidth mode and its echo (latency) mode,
// non-blocking (the default), blocking and rpoll-driven.
func TestUdpong(t *testing.T) {
	needLib(t, "udpong")
	for _, args := range []string{
		"-C 300 -S 1000",
		"-C 200 -S 64 -T e",
		"-C 300 -S 2000 -T b",
		"-C 200 -S 100 -T e -T b",
		"-C 300 -S 500 -T a",
		"-C 200 -S 64 -T e -T a",
	} {
		t.Run(args, func(t *testing.T) {
			sa, ca := addrPair()
			port := itoa(freePort(t))
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			sp := start(t, ctx, env(sa), append([]string{"udpong", "-b", sa, "-p", port}, strings.Fields(args)...)...)
			defer func() { sp.cmd.Process.Kill(); sp.wait() }() // it serves until killed
			waitUDP(t, sa, sp)
			cp := start(t, ctx, env(ca), append([]string{"udpong", "-s", sa, "-p", port}, strings.Fields(args)...)...)
			if err := cp.wait(); err != nil || !udpongResult.MatchString(cp.stdout.String()) {
				t.Fatalf("client %s\nserver %s", cp, sp)
			}
			t.Logf("%s", udpongResult.FindString(cp.stdout.String()))
		})
	}
}
