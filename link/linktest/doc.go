// Package linktest is a conformance suite for link.Endpoint implementations:
// the same send, receive, ICRC, error and close checks run over every link
// (link/pipe, link/udp) so that they behave alike. Call Run from a test with
// a function that makes a connected pair. It also has small helpers to build
// RoCE datagrams and packet batches. It is meant for tests only.
package linktest
