package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/softroce/softroce/internal/capibuild"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
)

// Environment variables the C library reads (capi/devices.go).
const (
	execEnvDevice = "SOFTROCE_DEVICE"
	execEnvAddr   = "SOFTROCE_ADDR"
)

func init() {
	commands.Add(&cli.Command{Name: "exec", Summary: "run an unmodified C verbs program on softroce (the C library)", Run: runExec})
}

// runExec is "softroce exec [-d DEV] [-a ADDR] [--] PROGRAM [ARGS]": it runs
// PROGRAM with the installed C library first on its library path, so that
// its libibverbs.so.1 and librdmacm.so.1 are softroce's. On Linux the
// program runs in a private mount namespace where the devices also appear
// as /dev/infiniband/uverbsN and /sys/class/infiniband/DEV (exec_linux.go).
func runExec(args []string, stdout, stderr io.Writer) int {
	var dev, addr, lib string
	var noView bool
	g := cli.Getopt{Prog: "softroce exec", InOrder: true,
		Synopsis: "[-d DEV] [-a ADDR] [-L DIR] [--no-view] [--] PROGRAM [ARGS...]"}
	g.Str('d', "device", &dev).Describe("DEV", "the device the program sees: a link, netdev or address (default: every link, or loopback)")
	g.Str('a', "addr", &addr).Describe("ADDR", "the IP address (or IP:port) the device binds (default: the link's, or the first free 127.0.0.x)")
	g.Str('L', "libdir", &lib).Describe("DIR", "where the library is installed (default $"+capibuild.EnvDir+" or ~/.local/lib/softroce)")
	g.Flag(0, "no-view", &noView).Describe("", "run without the private /dev/infiniband and /sys/class/infiniband view of the devices (Linux; UCX needs it)")
	ops, code, ok := g.ParseArgs(args, stdout, stderr, nil)
	if !ok {
		return code
	}
	if len(ops) == 0 {
		return cli.UsageErr(stderr, g.Prog, "no program given")
	}
	if dev != "" {
		if _, err := toolkit.ResolveDevice(dev); err != nil {
			fmt.Fprintf(stderr, "softroce exec: -d %s: %v\n", dev, err)
			return cli.ExitFailure
		}
	}
	if addr != "" {
		if _, err := toolkit.ParseDeviceAddr(addr); err != nil {
			return cli.UsageErr(stderr, g.Prog, "-a %s: %v", addr, err)
		}
	}
	if lib == "" {
		d, err := capibuild.Dir()
		if err != nil {
			fmt.Fprintf(stderr, "softroce exec: %v\n", err)
			return cli.ExitFailure
		}
		lib = d
	}
	if !capibuild.Installed(lib) {
		fmt.Fprintf(stderr, "softroce exec: no C library in %s: build it with 'go run ./capi/install' in the softroce source tree (needs gcc, libibverbs-dev, librdmacm-dev)\n", lib)
		return cli.ExitFailure
	}
	path, err := exec.LookPath(ops[0])
	if err != nil {
		fmt.Fprintf(stderr, "softroce exec: %v\n", err)
		return 127
	}
	env := os.Environ()
	ldpath := lib
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ldpath += ":" + old
	}
	env = setEnv(env, "LD_LIBRARY_PATH", ldpath)
	if dev != "" {
		env = setEnv(env, execEnvDevice, dev)
	}
	if addr != "" {
		env = setEnv(env, execEnvAddr, addr)
	}
	err = execProgram(path, ops, env, !noView, os.Stderr)
	fmt.Fprintf(stderr, "softroce exec: %s: %v\n", ops[0], err)
	return 126
}

// setEnv sets key=val in env, replacing an earlier value.
func setEnv(env []string, key, val string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}
