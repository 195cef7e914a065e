//go:build linux && cgo && softroce_capi

// Command capi is softroce's C ABI: built with -buildmode=c-shared into one
// file, libibverbs.so.1 (with librdmacm.so.1 as a link to it), it lets
// unmodified C programs linked against libibverbs run on softroce, with no
// kernel module and no root. Its C files lay out the structs programs read
// and fill the tables verbs.h's inline calls jump through; the logic is
// package verbs. Build and install it with `go run ./capi/install`.
package main

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#include "capi.h"
*/
import "C"

import (
	"log/slog"
	"net"
	"os"
	"path"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/sigwait"
	"github.com/softroce/softroce/internal/toolkit"
)

func main() {}

func init() {
	setProcs()
	if runtime.GOMAXPROCS(0) == 1 {
		C.sr_one_proc = 1
	}
	sigwait.Held = heldSigmask
	// Inits run on the runtime's first thread, which has started the
	// monitor thread by now: it takes the loader's timer slack back
	// (misc.c, "the runtime's monitor thread sleeps coarsely").
	C.sr_slack_back_here()
}

// setProcs sizes the runtime's processors (GOMAXPROCS) for a C program.
// Where the process may run on two CPUs or more it runs on at least two: a
// program's thread that calls the library holds a processor while it does,
// and the device's goroutines need another (with one, a ping-pong that
// waited on them took 7.6 ms a round trip). Confined to one CPU (taskset,
// a one-CPU machine) it keeps the runtime's default there, one processor,
// as the Go tools do: a second one only added thread switches and work for
// the runtime's monitor on that CPU (stock cmtime -c 100, each side on a
// CPU of its own: connect 22-24 µs a connection with two, 20-22 with one;
// the server's monitor thread used 1.1-1.6 ms of CPU a run, against
// 0.1-0.5). With one processor, the program's loops that find nothing to
// do hand it to the runtime now and then (sr_idle_turn, sr_idle_go), and
// a device's set-up collects its garbage at once (settleHeap).
// GOMAXPROCS in the environment is obeyed as it is.
//
// The value chosen is set explicitly, which keeps the runtime from
// changing it later as the CPUs allowed change (it looks once a second
// otherwise): the one-processor mode (sr_one_proc) is decided once.
func setProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n := runtime.GOMAXPROCS(0)
	if allowedCPUs() != 1 {
		n = max(n, 2)
	}
	runtime.GOMAXPROCS(n)
}

// allowedCPUs returns how many CPUs the calling thread may run on (its
// affinity mask, which taskset sets for the whole program); 0 if unknown.
func allowedCPUs() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return 0
	}
	return set.Count()
}

// srgo_yield is sr_idle_turn's on one processor: the calling thread gives
// the processor to the runtime's goroutines and timers, and takes it back
// once they ran (runtime.Gosched on a locked goroutine: another thread runs
// them meanwhile). A thread that calls the library in a loop keeps the
// processor otherwise: a retried RDMA SEND whose RNR timer the runtime
// serves completed 8-17 ms after the receive it waited for was posted,
// instead of 0.1-0.9 ms.
//
//export srgo_yield
func srgo_yield() { runtime.Gosched() }

// heldSigmask is sigwait.Held: the mask of a wait on a thread whose
// signals a blocking rsocket call holds (sr_sig_hold in misc.c).
func heldSigmask(m *unix.Sigset_t) bool {
	return C.sr_held_sigmask((*C.uint64_t)(unsafe.Pointer(&m.Val[0]))) != 0
}

// mapVersion is the version script's identity: the go command does not
// track the script, so install passes its hash to force a rebuild.
var mapVersion string

func debugLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func netInterfaceByName(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}

// srgo_read_sysfs answers ibv_read_sysfs_file for the files of softroce's
// own devices (/sys/class/infiniband/NAME/...): the length written, -1 for
// a file the device does not have, -2 for a path that is not softroce's.
//
//export srgo_read_sysfs
func srgo_read_sysfs(dir, file *C.char, buf *C.char, size C.int) C.int {
	p := path.Clean(C.GoString(dir) + "/" + C.GoString(file))
	const base = "/sys/class/infiniband/"
	if !strings.HasPrefix(p, base) {
		return -2
	}
	rest := strings.TrimPrefix(p, base)
	name, sub, _ := strings.Cut(rest, "/")
	loadDevices()
	idx := -1
	for i := range devList {
		if devList[i].info.Name == name {
			idx = i
		}
	}
	if idx < 0 {
		return -2
	}
	s := devList[idx]
	v, ok := toolkit.IBSysfsFiles(toolkit.LibraryDevice{Device: s.info, Auto: s.auto})[sub]
	switch {
	case ok:
	case sub == "device/numa_node":
		v = "-1"
	case strings.HasPrefix(sub, "ports/1/gid_attrs/types/"):
		v = "RoCE v2" // every GID of the table is RoCE v2
	case strings.HasPrefix(sub, "ports/1/gid_attrs/ndevs/") && s.info.Netdev != "":
		v = s.info.Netdev
	default:
		return -1
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(size))
	n := copy(b, v)
	if n < len(b) {
		b[n] = 0
	}
	return C.int(n)
}
