// Package netnstest is test support for tests that need two hosts: it
// creates two Linux network namespaces joined by a veth pair, runs a
// function or a command inside one of them, and deletes everything when the
// test ends.
//
// Only tests import it. Creating namespaces needs root and the ip command
// (iproute2); [Require] skips the test with a clear reason otherwise. Every ip
// command runs with a time limit, so a stuck command fails the test instead of
// hanging it.
//
// Network namespaces are Linux-only: on other systems [Require], [NewPair]
// and [Run] skip the test and [Do] fails, so the tests that use the package
// still build there.
package netnstest
