//go:build linux && cgo && softroce_capi

package main

/*
#include <stdlib.h>

extern void srgo_stop_profile(void);

static void sr_profile_atexit(void) { srgo_stop_profile(); }

static void sr_profile_register(void) { atexit(sr_profile_atexit); }
*/
import "C"

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// envCPUProfile names the file the library writes a Go CPU profile of the
// program's run to (go tool pprof FILE), as SOFTROCE_CPUPROFILE does for
// the Go tools; "%p" in it becomes the process ID, so that a server and a
// client each write their own. The profile ends when the program exits
// (exit or return from main) or is stopped by SIGINT or SIGTERM.
const envCPUProfile = "SOFTROCE_CPUPROFILE"

var profile struct {
	once sync.Once
	f    *os.File
}

func init() {
	name := os.Getenv(envCPUProfile)
	if name == "" {
		return
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err == nil {
		err = pprof.StartCPUProfile(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softroce: %s: %v\n", envCPUProfile, err)
		return
	}
	profile.f = f
	C.sr_profile_register()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		srgo_stop_profile()
		signal.Reset(s)
		syscall.Kill(os.Getpid(), s.(syscall.Signal))
	}()
}

// srgo_stop_profile ends the CPU profile (at exit, or on a signal).
//
//export srgo_stop_profile
func srgo_stop_profile() {
	profile.once.Do(func() {
		if profile.f != nil {
			pprof.StopCPUProfile()
			profile.f.Close()
		}
	})
}
