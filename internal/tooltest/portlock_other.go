//go:build !linux

package tooltest

import "testing"

// lockPort is the cross-process port reservation, on Linux only.
func lockPort(testing.TB, int) bool { return true }
