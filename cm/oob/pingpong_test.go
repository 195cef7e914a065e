package oob

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Values printed by the tools for each capture (../shared/captures/README.md).
var pingpongCaptures = []struct {
	name           string
	client, server PingpongDest
}{
	{"rc_pingpong.pcap", PingpongDest{QPN: 0x11, PSN: 0x408b7e}, PingpongDest{QPN: 0x11, PSN: 0x0b609f}},
	{"rc_pingpong_small.pcap", PingpongDest{QPN: 0x12, PSN: 0x5fc4c1}, PingpongDest{QPN: 0x12, PSN: 0x29b79e}},
	{"uc_pingpong.pcap", PingpongDest{QPN: 0x14, PSN: 0xf7060e}, PingpongDest{QPN: 0x14, PSN: 0xde29c9}},
	{"ud_pingpong.pcap", PingpongDest{QPN: 0x13, PSN: 0x3e4c4a}, PingpongDest{QPN: 0x13, PSN: 0x95607e}},
}

func TestPingpongCaptures(t *testing.T) {
	for _, tc := range pingpongCaptures {
		t.Run(tc.name, func(t *testing.T) {
			c := readCapture(t, tc.name)
			tc.client.GID, tc.server.GID = gid(clientIP), gid(serverIP)
			if len(c.turns) != 3 || !c.turns[0].fromClient || len(c.turns[0].data) != PingpongMsgLen ||
				len(c.turns[1].data) != PingpongMsgLen || string(c.turns[2].data) != "done\x00" {
				t.Fatalf("unexpected exchange shape: %d turns", len(c.turns))
			}
			for i, want := range []PingpongDest{tc.client, tc.server} {
				msg := c.turns[i].data
				got, err := ParsePingpongDest(msg)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("message %d (-want +got):\n%s", i, diff)
				}
				if enc := want.Append(nil); !bytes.Equal(enc, msg) {
					t.Errorf("encoding %q, captured %q", enc, msg)
				}
			}
			// The data packets use the exchanged values.
			if qpn, psn, ok := c.firstRequest(clientIP); !ok || qpn != tc.server.QPN || psn != tc.client.PSN {
				t.Errorf("client's first packet: QP %#x PSN %#x", qpn, psn)
			}
			if qpn, psn, ok := c.firstRequest(serverIP); !ok || qpn != tc.client.QPN || psn != tc.server.PSN {
				t.Errorf("server's first packet: QP %#x PSN %#x", qpn, psn)
			}
			if s := tc.client.String(); !strings.HasSuffix(s, ":00000000000000000000ffff0a4d000c") || len(s) != 51 {
				t.Errorf("String() = %q", s)
			}
		})
	}
}

// TestPingpongReplay runs our client against the captured server bytes and
// our server against the captured client bytes: what we send must be the
// captured bytes, exactly.
func TestPingpongReplay(t *testing.T) {
	for _, tc := range pingpongCaptures {
		c := readCapture(t, tc.name)
		tc.client.GID, tc.server.GID = gid(clientIP), gid(serverIP)
		t.Run(tc.name+"/client", func(t *testing.T) {
			cc, sc := tcpPair(t)
			errc := make(chan error, 1)
			go func() { errc <- replay(sc, c.turns, false) }()
			got, err := ClientExchange(testCtx(t), cc, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if got != tc.server {
				t.Errorf("remote %+v", got)
			}
		})
		t.Run(tc.name+"/server", func(t *testing.T) {
			cc, sc := tcpPair(t)
			errc := make(chan error, 1)
			go func() { errc <- replay(cc, c.turns, true) }()
			var hooked PingpongDest
			got, err := ServerExchange(testCtx(t), sc, tc.server, func(r PingpongDest) error { hooked = r; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if got != tc.client || hooked != tc.client {
				t.Errorf("remote %+v, hook saw %+v", got, hooked)
			}
		})
	}
}

var srqClient = []PingpongDest{{QPN: 0x15, PSN: 0xa40b41}, {QPN: 0x16, PSN: 0xa89a97}, {QPN: 0x17, PSN: 0x52fd95}, {QPN: 0x18, PSN: 0xac75c0}}
var srqServer = []PingpongDest{{QPN: 0x15, PSN: 0x55284a}, {QPN: 0x16, PSN: 0x740d6c}, {QPN: 0x17, PSN: 0x7a4046}, {QPN: 0x18, PSN: 0x7ae11d}}

// TestSRQPingpong checks ibv_srq_pingpong's exchange: 256 messages each way,
// the unused ones all zero.
func TestSRQPingpong(t *testing.T) {
	c := readCapture(t, "srq_pingpong.pcap")
	for i := range srqClient {
		srqClient[i].GID, srqServer[i].GID = gid(clientIP), gid(serverIP)
	}
	if len(c.turns) != 3 || len(c.turns[0].data) != SRQPingpongMaxQP*PingpongMsgLen ||
		len(c.turns[1].data) != SRQPingpongMaxQP*PingpongMsgLen || string(c.turns[2].data) != "done\x00" {
		t.Fatalf("unexpected exchange shape")
	}
	for side, local := range [][]PingpongDest{srqClient, srqServer} {
		enc, err := encodeDests(local, SRQPingpongMaxQP)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, c.turns[side].data) {
			t.Errorf("side %d: encoding differs from the capture", side)
		}
		for i := range SRQPingpongMaxQP {
			d, err := ParsePingpongDest(c.turns[side].data[i*PingpongMsgLen:])
			if err != nil {
				t.Fatal(err)
			}
			var want PingpongDest
			if i < len(local) {
				want = local[i]
			}
			if d != want {
				t.Errorf("side %d message %d: %+v, want %+v", side, i, d, want)
			}
		}
	}
	t.Run("client", func(t *testing.T) {
		cc, sc := tcpPair(t)
		errc := make(chan error, 1)
		go func() { errc <- replay(sc, c.turns, false) }()
		got, err := ClientExchangeMulti(testCtx(t), cc, srqClient, SRQPingpongMaxQP)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(srqServer, got[:4]); diff != "" || got[4] != (PingpongDest{}) {
			t.Errorf("remote (-want +got):\n%s", diff)
		}
	})
	t.Run("server", func(t *testing.T) {
		cc, sc := tcpPair(t)
		errc := make(chan error, 1)
		go func() { errc <- replay(cc, c.turns, true) }()
		got, err := ServerExchangeMulti(testCtx(t), sc, srqServer, SRQPingpongMaxQP, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(srqClient, got[:4]); diff != "" {
			t.Errorf("remote (-want +got):\n%s", diff)
		}
	})
}

// TestPingpongLoopback runs our client against our server over TCP.
func TestPingpongLoopback(t *testing.T) {
	cc, sc := tcpPair(t)
	a := PingpongDest{LID: 0, QPN: 0x123456, PSN: 0xabcdef, GID: gid(clientIP)}
	b := PingpongDest{LID: 0xffff, QPN: 0x11, PSN: 1, GID: [16]byte{0xfe, 0x80, 15: 1}}
	ctx := testCtx(t)
	errc := make(chan error, 1)
	var srvGot PingpongDest
	go func() {
		var err error
		srvGot, err = ServerExchange(ctx, sc, b, nil)
		errc <- err
	}()
	got, err := ClientExchange(ctx, cc, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got != b || srvGot != a {
		t.Errorf("client got %+v, server got %+v", got, srvGot)
	}
}

func TestPingpongErrors(t *testing.T) {
	for _, s := range []string{
		"", "0000:000011:408b7e", "0000:000011:408b7e:00000000000000000000ffff0a4d000", // short GID
		"00000:000011:408b7e:00000000000000000000ffff0a4d000c", "0000:0000111:408b7e:00000000000000000000ffff0a4d000c",
		"0000:00001g:408b7e:00000000000000000000ffff0a4d000c", "0000:000011:408b7e:00000000000000000000ffff0a4d000z",
		":000011:408b7e:00000000000000000000ffff0a4d000c",
	} {
		if _, err := ParsePingpongDest([]byte(s)); !errors.Is(err, ErrPingpongMsg) {
			t.Errorf("%q: %v", s, err)
		}
	}
	// sscanf-like leniency: narrower fields, upper case.
	d, err := ParsePingpongDest([]byte("0:11:408B7E:00000000000000000000FFFF0A4D000C\x00junk"))
	if err != nil || d.QPN != 0x11 || d.PSN != 0x408b7e || d.GID != gid(clientIP) {
		t.Errorf("lenient parse: %+v %v", d, err)
	}
	// The server's hook error stops the exchange before it answers.
	cc, sc := tcpPair(t)
	ctx := testCtx(t)
	hookErr := errors.New("cannot move QP")
	go func() { _, _ = ClientExchange(ctx, cc, PingpongDest{}) }()
	if _, err := ServerExchange(ctx, sc, PingpongDest{}, func(PingpongDest) error { return hookErr }); !errors.Is(err, hookErr) {
		t.Errorf("hook error: %v", err)
	}
	// A bad "done".
	cc, sc = tcpPair(t)
	go func() {
		var buf [PingpongMsgLen]byte
		_, _ = cc.Write((&PingpongDest{}).Append(nil))
		_, _ = cc.Read(buf[:])
		_, _ = cc.Write([]byte("nope\x00"))
	}()
	if _, err := ServerExchange(ctx, sc, PingpongDest{}, nil); !errors.Is(err, ErrDone) {
		t.Errorf("bad done: %v", err)
	}
	if _, err := ClientExchangeMulti(ctx, cc, make([]PingpongDest, 3), 2); !errors.Is(err, ErrCount) {
		t.Errorf("count: %v", err)
	}
}

// TestPingpongContext checks that cancellation and deadlines unblock a
// stalled exchange.
func TestPingpongContext(t *testing.T) {
	cc, _ := tcpPair(t) // the server never answers
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := ClientExchange(ctx, cc, PingpongDest{})
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancel: %v", err)
	}
	cc2, _ := tcpPair(t)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50_000_000)
	defer cancel2()
	if _, err := ClientExchange(ctx2, cc2, PingpongDest{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v", err)
	}
}
