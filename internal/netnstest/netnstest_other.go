//go:build !linux

package netnstest

import (
	"errors"
	"testing"
)

// errNotLinux is what [Do] returns on systems without network namespaces.
var errNotLinux = errors.New("netnstest: network namespaces are Linux-only")

// Require skips t: network namespaces are Linux-only.
func Require(t testing.TB) {
	t.Helper()
	t.Skip("network namespaces and veth pairs are Linux-only")
}

// NewPair skips t: network namespaces are Linux-only.
func NewPair(t testing.TB, cfg Config) *Pair {
	t.Helper()
	Require(t)
	return nil
}

// Do returns an error: network namespaces are Linux-only.
func Do(ns string, f func() error) error { return errNotLinux }

// Run skips t: network namespaces are Linux-only.
func Run(t testing.TB, ns string, f func()) {
	t.Helper()
	Require(t)
}
