package netnstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Require skips t unless the process runs as root and the ip command
// (iproute2) is installed, the two things [NewPair] needs.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces and a veth pair needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) is not installed: it creates the network namespaces")
	}
}

// NewPair calls [Require], then creates two namespaces joined by a veth
// pair as cfg says, with both links up. t.Cleanup deletes the namespaces
// (and with them the veth pair).
func NewPair(t testing.TB, cfg Config) *Pair {
	t.Helper()
	Require(t)
	if len(cfg.Prefix) > 6 {
		t.Fatalf("netnstest: prefix %q is longer than 6 bytes: interface names would exceed 15", cfg.Prefix)
	}
	id := rand.IntN(1000000)
	p := &Pair{}
	for i, side := range [2]string{"a", "b"} {
		name := fmt.Sprintf("%s%d%s", cfg.Prefix, id, side)
		p.NS[i], p.Veth[i] = name, name
		p.Addr[i], _, _ = strings.Cut(cfg.IPv4[i], "/")
	}
	for _, ns := range p.NS {
		IP(t, "netns", "add", ns)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
			defer cancel()
			exec.CommandContext(ctx, "ip", "netns", "delete", ns).Run()
		})
	}
	IP(t, "link", "add", p.Veth[0], "netns", p.NS[0], "type", "veth", "peer", "name", p.Veth[1], "netns", p.NS[1])
	if cfg.IPv6 != [2]string{} {
		for i := range 2 {
			IP(t, "-n", p.NS[i], "link", "set", p.Veth[i], "addrgenmode", "none")
		}
	}
	for i := range 2 {
		if cfg.IPv4[i] != "" {
			IP(t, "-n", p.NS[i], "addr", "add", cfg.IPv4[i], "dev", p.Veth[i])
		}
	}
	for i := range 2 {
		if cfg.IPv6[i] != "" {
			IP(t, "-n", p.NS[i], "addr", "add", cfg.IPv6[i], "dev", p.Veth[i], "nodad")
		}
	}
	for i := range 2 {
		IP(t, "-n", p.NS[i], "link", "set", p.Veth[i], "up")
	}
	if cfg.Loopback {
		for i := range 2 {
			IP(t, "-n", p.NS[i], "link", "set", "lo", "up")
		}
	}
	return p
}

// enter locks the calling goroutine to its OS thread and switches the
// thread into namespace ns. The returned exit switches it back and unlocks
// it; if switching back fails, exit leaves the thread locked, so it dies
// with its goroutine and never runs other code in the wrong namespace.
func enter(ns string) (exit func() error, err error) {
	target, err := unix.Open(filepath.Join(RunDir, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netnstest: opening network namespace %s: %w", ns, err)
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("netnstest: opening this thread's network namespace: %w", err)
	}
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		unix.Close(self)
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("netnstest: entering network namespace %s: %w", ns, err)
	}
	return func() error {
		defer unix.Close(self)
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netnstest: restoring the network namespace after %s: %w", ns, err)
		}
		runtime.UnlockOSThread()
		return nil
	}, nil
}

// Do runs f on the calling goroutine, its OS thread switched into network
// namespace ns (sockets created and interface names looked up in f belong
// to ns; sockets keep working after f returns). It returns f's error, joined
// with any error entering or leaving ns.
func Do(ns string, f func() error) (err error) {
	exit, err := enter(ns)
	if err != nil {
		return err
	}
	defer func() {
		if xerr := exit(); xerr != nil {
			err = errors.Join(err, xerr)
		}
	}()
	return f()
}

// Run is [Do] for a function that reports to t itself: f may call t.Fatal
// (the thread still switches back). Failing to enter ns is fatal; failing
// to leave it is an error.
func Run(t testing.TB, ns string, f func()) {
	t.Helper()
	exit, err := enter(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exit(); err != nil {
			t.Error(err)
		}
	}()
	f()
}
