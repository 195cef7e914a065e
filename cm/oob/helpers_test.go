package oob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

func gid(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	client, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// replay plays one side of a captured exchange on conn: that side's turns
// are written as captured, the other side's turns are read and compared with
// the capture. It runs until the turns are exhausted.
func replay(conn net.Conn, turns []turn, asClient bool) error {
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	for i, t := range turns {
		if t.fromClient == asClient {
			if _, err := conn.Write(t.data); err != nil {
				return fmt.Errorf("turn %d: write: %w", i, err)
			}
			continue
		}
		got := make([]byte, len(t.data))
		if _, err := io.ReadFull(conn, got); err != nil {
			return fmt.Errorf("turn %d: read %d bytes: %w", i, len(t.data), err)
		}
		if !bytes.Equal(got, t.data) {
			return fmt.Errorf("turn %d differs from the capture:\n got %q\nwant %q", i, got, t.data)
		}
	}
	return nil
}
