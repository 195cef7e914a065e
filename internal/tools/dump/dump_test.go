package dump

import (
	"bytes"
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/capture"
	"github.com/softroce/softroce/internal/tooltest"
	"github.com/softroce/softroce/wire"
)

var updateDump = flag.Bool("update-dump", false, "rewrite the dump golden files in testdata")

// capturesDir holds the repository's golden captures of kernel rxe traffic
// (its README.md has each tool's command line and printed output).

// rpingPcap is the rping capture, the one most dump tests decode.
var rpingPcap = tooltest.CapturesDir + "/rping.pcap"

// dlUTC makes the dump's time-of-day output independent of the machine's zone.
func dlUTC(t *testing.T) {
	saved := time.Local
	time.Local = time.UTC
	t.Cleanup(func() { time.Local = saved })
}

func dlGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateDump {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update-dump to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestDumpGoldenRping(t *testing.T) {
	dlUTC(t)
	out, errOut, code := dlRun(t, "dump", "-r", rpingPcap)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	dlGolden(t, "rping.dump", out)
}

// TestDumpCaptures decodes kernel rxe captures from the repository's
// testdata/captures, and all of ../shared/captures when that directory
// exists: every packet known, no bad ICRC.
func TestDumpCaptures(t *testing.T) {
	var files []string
	for _, name := range []string{"atomic_lat.pcap", "rc_pingpong_small.pcap", "read_lat.pcap", "rping.pcap", "ud_pingpong.pcap", "write_bw_rdmacm.pcap"} {
		files = append(files, filepath.Join(tooltest.CapturesDir, name))
	}
	shared, _ := filepath.Glob(filepath.Join(tooltest.ModuleRoot, "..", "shared", "captures", "*.pcap"))
	if len(shared) == 0 {
		t.Log("../shared/captures not present: checking testdata/captures only")
	}
	for _, f := range append(files, shared...) {
		out, errOut, code := dlRun(t, "dump", "-r", f)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		sum := lines[len(lines)-1]
		if code != 0 || errOut != "" || !strings.Contains(sum, " packets, 0 bad ICRC, 0 unknown") || strings.HasPrefix(sum, "0 packets") {
			t.Errorf("%s: exit %d, stderr %q, summary %q", f, code, errOut, sum)
		}
		if strings.Contains(out, "BAD-ICRC") || strings.Contains(out, "UNKNOWN") {
			t.Errorf("%s: flagged packets", f)
		}
	}
}

// dlSynthPcap writes one packet of every kind softroce decodes, plus a
// corrupt one, an unknown opcode and a truncated frame.
func dlSynthPcap(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "synth.pcap")
	w, err := capture.Create(path, &capture.Options{TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddrPort("10.0.0.1:49152")
	b := netip.MustParseAddrPort("10.0.0.2:4791")
	a6 := netip.MustParseAddrPort("[fd00::1]:49153")
	b6 := netip.MustParseAddrPort("[fd00::2]:4791")
	ts := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	bth := func(op wire.Opcode, psn uint32) wire.BTH {
		return wire.BTH{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: psn, AckReq: true}
	}
	reth := wire.RETH{VA: 0x7f0000001000, RKey: 0x1234, Length: 8192}
	mad := make([]byte, 256)
	copy(mad, []byte{1, 0x07, 2, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x12, 0, 0})
	copy(mad[24:], []byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 28})
	pkts := []wire.Packet{
		{BTH: bth(wire.RCSendFirst, 1), Payload: make([]byte, 1024)},
		{BTH: bth(wire.RCSendLastImm, 2), Imm: 0xcafe, Payload: make([]byte, 3)},
		{BTH: bth(wire.RCSendOnlyInv, 3), IETH: 0x5678, Payload: []byte("x")},
		{BTH: bth(wire.RCWriteFirst, 4), RETH: reth, Payload: make([]byte, 1024)},
		{BTH: bth(wire.RCWriteOnlyImm, 5), RETH: reth, Imm: 7, Payload: []byte("hi")},
		{BTH: bth(wire.RCReadRequest, 6), RETH: reth},
		{BTH: bth(wire.RCReadResponseFirst, 6), AETH: wire.AETH{Syndrome: wire.SyndromeACK, MSN: 9}, Payload: make([]byte, 1024)},
		{BTH: bth(wire.RCReadResponseMiddle, 7), Payload: make([]byte, 1024)},
		{BTH: bth(wire.RCAcknowledge, 8), AETH: wire.AETH{Syndrome: 0x04, MSN: 10}},
		{BTH: bth(wire.RCAcknowledge, 8), AETH: wire.AETH{Syndrome: wire.AETHTypeRNR | 14, MSN: 10}},
		{BTH: bth(wire.RCAcknowledge, 8), AETH: wire.AETH{Syndrome: wire.SyndromeNAKSeq, MSN: 10}},
		{BTH: bth(wire.RCAcknowledge, 8), AETH: wire.AETH{Syndrome: wire.SyndromeNAKRemAcc, MSN: 10}},
		{BTH: bth(wire.RCCompareSwap, 9), AtomicETH: wire.AtomicETH{VA: 0x1000, RKey: 0x99, SwapAdd: 2, Compare: 1}},
		{BTH: bth(wire.RCFetchAdd, 10), AtomicETH: wire.AtomicETH{VA: 0x1008, RKey: 0x99, SwapAdd: 5}},
		{BTH: bth(wire.RCAtomicAcknowledge, 10), AETH: wire.AETH{Syndrome: wire.SyndromeACK, MSN: 11}, AtomicAckETH: wire.AtomicAckETH{Orig: 41}},
		{BTH: bth(wire.RCFlush, 11), FETH: wire.FETH{PLT: wire.FlushPersistence, SEL: wire.FlushSelWholeMR}, RETH: reth},
		{BTH: bth(wire.RCAtomicWrite, 12), RETH: wire.RETH{VA: 0x2000, RKey: 0x99, Length: 8}, Payload: make([]byte, 8)},
		{BTH: wire.BTH{Opcode: wire.UCWriteOnly, SE: true, PKey: 0x7fff, DestQP: 0x13, PSN: 1}, RETH: reth, Payload: []byte("uc")},
		{BTH: wire.BTH{Opcode: wire.UDSendOnlyImm, PKey: wire.DefaultPKey, DestQP: 0x14}, DETH: wire.DETH{QKey: 0x11111111, SrcQP: 0x15}, Imm: 1, Payload: []byte("ud")},
		{BTH: wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1, AckReq: true}, DETH: wire.DETH{QKey: wire.GSIQKey, SrcQP: 1}, Payload: mad},
	}
	for i := range pkts {
		src, dst := a, b
		if i%5 == 4 {
			src, dst = a6, b6
		}
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), src, dst, pkts[i].Append(nil)); err != nil {
			t.Fatal(err)
		}
	}
	// An unknown opcode (RD) and a CNP.
	rd := (&wire.Packet{BTH: wire.BTH{Opcode: wire.TransportRD | wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: 3}}).AppendHeaders(nil)
	w.WritePacket(ts.Add(time.Second), a, b, append(rd, make([]byte, 12)...))
	cnp := (&wire.Packet{BTH: wire.BTH{Opcode: wire.OpCNP, BECN: true, PKey: wire.DefaultPKey, DestQP: 3}}).AppendHeaders(nil)
	w.WritePacket(ts.Add(time.Second), a, b, append(cnp, make([]byte, 20)...))
	// An empty datagram: a same-host lane's wake-up (udp.Config.Local).
	w.WritePacket(ts.Add(time.Second), a, b, nil)
	w.Close()

	// A corrupt copy of the first packet (a bit flipped in the payload,
	// after the ICRC was computed) and a truncated one, as raw frames.
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w2, _ := capture.NewWriter(&buf, nil)
	first := img[24+16 : 24+16+14+20+8+12+1024+4]
	bad := bytes.Clone(first)
	bad[100] ^= 1
	w2.WriteFrame(ts.Add(2*time.Second), bad, 0)
	w2.WriteFrame(ts.Add(2*time.Second), first[:80], len(first))
	img = append(img, buf.Bytes()[24:]...)
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDumpGoldenSynth(t *testing.T) {
	dlUTC(t)
	path := dlSynthPcap(t)
	out, errOut, code := dlRun(t, "dump", "-r", path, "-tttt")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	dlGolden(t, "synth.dump", out)
	if !strings.HasSuffix(out, "25 packets, 1 bad ICRC, 1 unknown, 1 truncated\n") {
		t.Errorf("summary: %q", out[strings.LastIndex(out[:len(out)-1], "\n")+1:])
	}
}

func TestDumpVerboseHex(t *testing.T) {
	dlUTC(t)
	out, _, code := dlRun(t, "dump", "-r", tooltest.CapturesDir+"/rc_pingpong_small.pcap", "-v", "-x", "-ttt")
	if code != 0 {
		t.Fatal(code)
	}
	// The whole first packet: header fields (tos, ttl and id as tcpdump -v
	// reads them from the IPv4 header, the ICRC from the trailer) and the
	// hex of the RoCE bytes.
	first := strings.Join(strings.SplitN(out, "\n", 7)[:6], "\n")
	want := "0.000000 10.77.0.12.49476 > 10.77.0.11.4791: RC_SEND_ONLY dqp 0x000012 psn 0x5fc4c1 ackreq pkey 0xffff payload 64 pad 0 tos 0x00 ttl 64 id 62830 icrc 0xfc97451f\n" +
		"\t0x0000: 0400 ffff 0000 0012 805f c4c1 7b7b 7b7b \n" +
		"\t0x0010: 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b \n" +
		"\t0x0020: 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b \n" +
		"\t0x0030: 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b \n" +
		"\t0x0040: 7b7b 7b7b 7b7b 7b7b 7b7b 7b7b 1f45 97fc "
	if first != want {
		t.Errorf("got\n%s\nwant\n%s", first, want)
	}
}

func TestDumpFlags(t *testing.T) {
	for _, tc := range []struct {
		args   string
		code   int
		errHas string
	}{
		{"dump", 2, "give -r FILE"},
		{"dump -r a -i lo", 2, "not both"},
		{"dump -r " + rpingPcap + " -w x", 2, "-w goes with -i"},
		{"dump -r " + rpingPcap + " -port 0", 2, "bad --port"},
		{"dump -r " + rpingPcap + " -c 0", 2, "option -c: 0 is out of range"},
		{"dump -r " + rpingPcap + " -Z", 2, "invalid option -- 'Z'"},
		{"dump -r " + rpingPcap + " -tttttt", 2, "only -t, -tt, -ttt, -tttt and -ttttt are supported (-t given 6 times)"},
		{"dump -r " + rpingPcap + " -t -tttttt", 2, "only -t, -tt, -ttt, -tttt and -ttttt are supported (-t given 7 times)"},
		{"dump -r " + rpingPcap + " -ttt -vtt -t", 2, "(-t given 6 times)"},
		{"dump -r " + rpingPcap + " -tt -ttt", 0, ""},
		{"dump -r " + rpingPcap + " extra", 2, "unexpected argument"},
		{"dump -r testdata/nonexistent.pcap", 1, "no such file"},
		{"dump -r testdata/rping.dump", 1, "not a pcap or pcapng file"},
		{"dump -i nosuchif0 -w x", 1, `no interface "nosuchif0"`},
		{"dump -h", 0, ""},
	} {
		_, errOut, code := dlRun(t, strings.Fields(tc.args)...)
		if code != tc.code || !strings.Contains(errOut, tc.errHas) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.errHas)
		}
	}
	// Other ports: nothing of rping is on 4792.
	out, _, _ := dlRun(t, "dump", "-r", rpingPcap, "-port", "4792,18515")
	if out != "0 packets, 0 bad ICRC, 0 unknown (41 other frames skipped)\n" {
		t.Errorf("-port: %q", out)
	}
}

// FuzzDumpDecode feeds arbitrary UDP payloads (and truncation) to the
// packet printer: it must never panic, whatever the headers claim.
func FuzzDumpDecode(f *testing.F) {
	img, err := os.ReadFile(rpingPcap)
	if err != nil {
		f.Fatal(err)
	}
	r, err := capture.NewReader(bytes.NewReader(img), nil)
	if err != nil {
		f.Fatal(err)
	}
	var p capture.Packet
	for r.Next(&p) == nil {
		f.Add(bytes.Clone(p.Payload), uint16(0))
	}
	f.Add([]byte{0x81, 0, 0xff, 0xff, 0x40, 0, 0, 3, 0, 0, 0, 0}, uint16(40))
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	f.Fuzz(func(t *testing.T, payload []byte, extra uint16) {
		d := &dumpDecoder{c: &dumpConfig{verbose: extra&1 != 0, hexdump: extra&2 != 0, local: time.UTC}, out: io.Discard}
		p := capture.Packet{
			Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"),
			IPHdr: ip, Payload: payload, Len: len(payload), VLAN: -1,
		}
		if extra > 3 {
			p.Truncated = true
			p.Len += int(extra)
		}
		d.print(&p)
		if d.n.packets != 1 {
			t.Fatal("not counted")
		}
	})
}

// TestDumpTcpdumpFlags: tcpdump's grouped -vx, -nn and -c N work with -r.
func TestDumpTcpdumpFlags(t *testing.T) {
	out, errOut, code := dlRun(t, "dump", "-r", rpingPcap, "-vx", "-nn", "-c", "2")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasSuffix(out, "\n2 packets, 0 bad ICRC, 0 unknown\n") || !strings.Contains(out, "\n\t0x0000: ") ||
		!strings.Contains(out, " icrc 0x") {
		t.Errorf("-vx -nn -c 2:\n%s", out)
	}
	// Options after -r's operand and grouped -tt (epoch timestamps).
	out, _, code = dlRun(t, "dump", "-c", "1", "-r", rpingPcap, "-tt")
	if code != 0 || !regexp.MustCompile(`^\d{10}\.\d{6} `).MatchString(out) || !strings.HasSuffix(out, "\n1 packets, 0 bad ICRC, 0 unknown\n") {
		t.Errorf("-c 1 -tt:\n%s", out)
	}
}
