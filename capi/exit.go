//go:build linux && cgo && softroce_capi

package main

/*
#include <stdlib.h>

extern void srgo_run_exit(void);

static void sr_exit_hook(void) { srgo_run_exit(); }

static void sr_exit_register(void) { atexit(sr_exit_hook); }
*/
import "C"

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// The library's work at the program's end (the CPU profile, the counters
// file): run once, when the program exits (exit or return from main) or
// is stopped by SIGINT or SIGTERM, which are then re-raised. Only an
// opt-in environment variable installs it: the signal handler changes
// what those signals do to the program meanwhile.
var exitHooks struct {
	mu    sync.Mutex
	fs    []func()
	setup sync.Once
	ran   sync.Once
}

// onExit adds f to the work done at the program's end.
func onExit(f func()) {
	exitHooks.mu.Lock()
	exitHooks.fs = append(exitHooks.fs, f)
	exitHooks.mu.Unlock()
	exitHooks.setup.Do(func() {
		C.sr_exit_register()
		// A signal the program ignores (as a shell's background job
		// ignores SIGINT) stays ignored: catching it would end a
		// program that meant to live through it.
		var sigs []os.Signal
		for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM} {
			if !signal.Ignored(s) {
				sigs = append(sigs, s)
			}
		}
		if len(sigs) == 0 {
			return
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, sigs...)
		go func() {
			s := <-sig
			srgo_run_exit()
			// Both go back to what they did before, so that the
			// re-raised one (or the other, arriving meanwhile)
			// acts as it would have without the library.
			signal.Reset(sigs...)
			syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}()
	})
}

// srgo_run_exit runs the exit hooks, in the order they were added, once.
//
//export srgo_run_exit
func srgo_run_exit() {
	exitHooks.ran.Do(func() {
		exitHooks.mu.Lock()
		fs := exitHooks.fs
		exitHooks.mu.Unlock()
		for _, f := range fs {
			f()
		}
	})
}
