package interop

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/wire"
)

// These run without the harness: they check the counting the live tests
// rely on.

func TestParseRdmaStat(t *testing.T) {
	out := "link rxe0/1 sent_pkts 571 rcvd_pkts 20736 duplicate_request 256 out_of_seq_request 0 rcvd_seq_err 3 \n"
	got, err := parseRdmaStat(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"sent_pkts": 571, "rcvd_pkts": 20736, "duplicate_request": 256, "out_of_seq_request": 0, "rcvd_seq_err": 3}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseRdmaStat (-want +got):\n%s", d)
	}
	for _, bad := range []string{"", "link rxe0/1 sent_pkts", "link rxe0/1 sent_pkts x", "link rxe0/1 rcvd_pkts 1"} {
		if _, err := parseRdmaStat(bad); err == nil {
			t.Errorf("parseRdmaStat(%q): no error", bad)
		}
	}
}

func TestCountPcap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pcap")
	w, err := capture.Create(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	self := netip.MustParseAddrPort(hostIP + ":4791")
	peer := netip.MustParseAddrPort("10.77.0.13:4791")
	pkt := func(op wire.Opcode, syndrome uint8) []byte {
		h := wire.BTH{Opcode: op, PKey: 0xffff, DestQP: 0x11, PSN: 1}
		b := h.Append(nil)
		if op == wire.OpAcknowledge {
			a := wire.AETH{Syndrome: syndrome}
			b = a.Append(b)
		} else {
			b = append(b, make([]byte, 64)...)
		}
		return append(b, 0, 0, 0, 0) // ICRC (not checked)
	}
	ts := time.Unix(1, 0)
	for _, p := range []struct {
		src, dst netip.AddrPort
		b        []byte
	}{
		{self, peer, pkt(wire.OpWriteOnly, 0)},
		{self, peer, pkt(wire.OpAcknowledge, wire.SyndromeNAKSeq)},
		{self, peer, pkt(wire.OpAcknowledge, wire.SyndromeACK)},
		{self, peer, pkt(wire.OpAcknowledge, wire.SyndromeNAKSeq)},
		{peer, self, pkt(wire.OpAcknowledge, wire.SyndromeNAKSeq)},
		{peer, self, pkt(wire.OpReadResponseOnly, 0)},
	} {
		if err := w.WritePacket(ts, p.src, p.dst, p.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := countPcap(path, hostIP)
	if err != nil {
		t.Fatal(err)
	}
	if want := (sideCount{sent: 4, rcvd: 2, naks: 2}); got != want {
		t.Errorf("countPcap = %+v, want %+v", got, want)
	}
}

func TestResultLine(t *testing.T) {
	for _, tc := range []struct {
		line        string
		bytes, iter string
	}{
		{" 4194304    5                16.80              16.79  \t\t   0.000004", "4194304", "5"},
		{" 64      200          139.02         190346.44      210.88   \t       2524.11     \t-nan   \t\t95758.82 \t\t190346.44", "64", "200"},
		{" 8       1000           5.00          21.30           6.10            6.50           0.90            9.80            21.30", "8", "1000"},
	} {
		m := resultLine.FindStringSubmatch("header\n" + tc.line + "\n-----\n")
		if m == nil || m[1] != tc.bytes || m[2] != tc.iter {
			t.Errorf("resultLine on %q: %q", tc.line, m)
		}
	}
	for _, bad := range []string{" #bytes     #iterations    BW peak[MB/sec]", " local address: LID 0000 QPN 0x0011", " 64 200"} {
		if m := resultLine.FindString(bad); m != "" {
			t.Errorf("resultLine matched %q", bad)
		}
	}
}
