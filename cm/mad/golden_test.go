package mad

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/softroce/softroce/wire"
)

var captures = []string{"rping.pcap", "ucmatose.pcap", "udaddy.pcap", "write_bw_rdmacm.pcap"}

var (
	client = netip.MustParseAddr("10.77.0.12") // active side in every capture
	server = netip.MustParseAddr("10.77.0.11")
)

func gidOf(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// TestCaptureRoundTrip parses every CM MAD of the rdma_cm captures and checks
// that re-encoding gives the identical 256 bytes.
func TestCaptureRoundTrip(t *testing.T) {
	for _, name := range captures {
		mads := cmMADs(t, name)
		if len(mads) == 0 {
			t.Fatalf("%s: no CM MADs", name)
		}
		for _, f := range mads {
			if f.pkt.BTH.Opcode != wire.UDSendOnly || f.pkt.DETH.QKey != wire.GSIQKey || f.pkt.DETH.SrcQP != 1 {
				t.Errorf("%s frame %d: not a GSI UD SEND: %+v %+v", name, f.index, f.pkt.BTH, f.pkt.DETH)
			}
			m, err := ParseMessage(f.pkt.Payload)
			if err != nil {
				t.Fatalf("%s frame %d: %v", name, f.index, err)
			}
			out, err := m.Append(nil)
			if err != nil {
				t.Fatalf("%s frame %d: append: %v", name, f.index, err)
			}
			if !bytes.Equal(out, f.pkt.Payload) {
				t.Errorf("%s frame %d %v: re-encoding differs\n got %x\nwant %x", name, f.index, m.Attr(), out, f.pkt.Payload)
			}
		}
	}
}

// firstPSN returns the PSN of the first request packet from src to QP qpn.
func firstPSN(frames []roceFrame, src netip.Addr, qpn uint32) (uint32, bool) {
	for _, f := range frames {
		if f.src == src && f.pkt.BTH.DestQP == qpn && f.pkt.Mask&wire.IsRequest != 0 {
			return f.pkt.BTH.PSN, true
		}
	}
	return 0, false
}

// TestCaptureConnections checks the REQ/REP/RTU/DREQ/DREP fields of the RC
// captures against each other and against the data packets that follow.
func TestCaptureConnections(t *testing.T) {
	for _, tc := range []struct {
		name       string
		port       uint16
		conns      int
		respRes    uint8
		retry, rnr uint8
	}{
		{"rping.pcap", 7174, 1, 1, 7, 7},
		{"ucmatose.pcap", 7471, 1, 1, 5, 0},
		{"write_bw_rdmacm.pcap", 18515, 2, 0, 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frames := readRoCE(t, tc.name)
			reqs := map[uint32]*REQ{}
			reps := map[uint32]*REP{} // by RemoteCommID (= REQ's LocalCommID)
			var rtus, dreqs, dreps int
			for _, f := range frames {
				if f.pkt.BTH.DestQP != 1 {
					continue
				}
				b := f.pkt.Payload
				h, err := ParseHeader(b)
				if err != nil {
					t.Fatal(err)
				}
				switch h.AttrID {
				case AttrREQ:
					m := new(REQ)
					if err := m.Parse(b); err != nil {
						t.Fatal(err)
					}
					if f.src != client {
						t.Errorf("REQ from %v", f.src)
					}
					reqs[m.LocalCommID] = m
				case AttrREP:
					m := new(REP)
					if err := m.Parse(b); err != nil {
						t.Fatal(err)
					}
					reps[m.RemoteCommID] = m
				case AttrRTU:
					var m RTU
					if err := m.Parse(b); err != nil {
						t.Fatal(err)
					}
					rep := reps[m.LocalCommID]
					if rep == nil || rep.LocalCommID != m.RemoteCommID || rep.TID != m.TID {
						t.Errorf("RTU %+v does not match a REP", m.Header)
					}
					rtus++
				case AttrDREQ:
					var m DREQ
					if err := m.Parse(b); err != nil {
						t.Fatal(err)
					}
					// The DREQ names the receiver's QPN.
					if f.src == client {
						rep := reps[m.LocalCommID]
						if rep == nil || m.RemoteQPN != rep.LocalQPN {
							t.Errorf("DREQ from client: RemoteQPN %#x, REP %+v", m.RemoteQPN, rep)
						}
					} else if req := reqs[m.RemoteCommID]; req == nil || m.RemoteQPN != req.LocalQPN {
						t.Errorf("DREQ from server: RemoteQPN %#x", m.RemoteQPN)
					}
					dreqs++
				case AttrDREP:
					var m DREP
					if err := m.Parse(b); err != nil {
						t.Fatal(err)
					}
					dreps++
				default:
					t.Errorf("unexpected %v", h.AttrID)
				}
			}
			if len(reqs) != tc.conns || len(reps) != tc.conns || rtus != tc.conns || dreqs != tc.conns || dreps != tc.conns {
				t.Fatalf("REQ %d REP %d RTU %d DREQ %d DREP %d, want %d each", len(reqs), len(reps), rtus, dreqs, dreps, tc.conns)
			}
			for id, req := range reqs {
				rep := reps[id]
				if rep == nil {
					t.Fatalf("no REP for REQ %#x", id)
				}
				if ps, port, ok := ParseServiceID(req.ServiceID); !ok || ps != PortSpaceTCP || port != tc.port {
					t.Errorf("service ID %#x -> %v %d %v", req.ServiceID, ps, port, ok)
				}
				if req.ServiceID != ServiceID(PortSpaceTCP, tc.port) {
					t.Errorf("ServiceID(TCP, %d) = %#x, REQ has %#x", tc.port, ServiceID(PortSpaceTCP, tc.port), req.ServiceID)
				}
				hdr, user, err := ParseCMAHeader(req.PrivateData)
				if err != nil {
					t.Fatal(err)
				}
				if hdr.Src != client || hdr.Dst != server || hdr.IPVersion() != 4 || len(user) != MaxREQUserData {
					t.Errorf("cma_hdr %+v", hdr)
				}
				want := REQ{
					Header:      Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, TID: req.TID, AttrID: AttrREQ},
					LocalCommID: id, ServiceID: req.ServiceID, LocalCAGUID: 0x505400fffe770012,
					LocalQPN: req.LocalQPN, ResponderResources: tc.respRes, InitiatorDepth: tc.respRes,
					RemoteCMResponseTimeout: 20, TransportType: TransportRC, StartingPSN: req.StartingPSN,
					LocalCMResponseTimeout: 20, RetryCount: tc.retry, PKey: 0xFFFF, PathMTU: wire.MTU1024,
					RNRRetryCount: tc.rnr, MaxCMRetries: 15,
					Primary: Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gidOf(client), RemoteGID: gidOf(server),
						FlowLabel: req.Primary.FlowLabel, HopLimit: 64, LocalACKTimeout: 19},
					PrivateData: req.PrivateData,
				}
				if diff := cmp.Diff(&want, req); diff != "" {
					t.Errorf("REQ (-want +got):\n%s", diff)
				}
				wantRep := REP{
					Header:      Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: 3, TID: req.TID, AttrID: AttrREP},
					LocalCommID: rep.LocalCommID, RemoteCommID: id, LocalQPN: rep.LocalQPN, StartingPSN: rep.StartingPSN,
					ResponderResources: tc.respRes, InitiatorDepth: tc.respRes, TargetACKDelay: 15, RNRRetryCount: 7,
					LocalCAGUID: 0x505400fffe770011, PrivateData: rep.PrivateData,
				}
				if diff := cmp.Diff(&wantRep, rep); diff != "" {
					t.Errorf("REP (-want +got):\n%s", diff)
				}
				// Each side's Starting PSN is the PSN its peer transmits with:
				// the passive side sends from the REQ's PSN, the active side
				// from the REP's (Linux cm.c: REQ PSN -> passive sq_psn).
				if psn, ok := firstPSN(frames, client, rep.LocalQPN); ok && psn != rep.StartingPSN {
					t.Errorf("client's first PSN to QP %#x = %#x, REP StartingPSN %#x", rep.LocalQPN, psn, rep.StartingPSN)
				}
				if psn, ok := firstPSN(frames, server, req.LocalQPN); ok && psn != req.StartingPSN {
					t.Errorf("server's first PSN to QP %#x = %#x, REQ StartingPSN %#x", req.LocalQPN, psn, req.StartingPSN)
				}
				if _, ok := firstPSN(frames, client, rep.LocalQPN); !ok {
					t.Errorf("no client data on QP %#x", rep.LocalQPN)
				}
			}
		})
	}
}

// TestCaptureRping pins the exact values of the rping connection.
func TestCaptureRping(t *testing.T) {
	mads := cmMADs(t, "rping.pcap")
	var req REQ
	if err := req.Parse(mads[0].pkt.Payload); err != nil {
		t.Fatal(err)
	}
	if req.ServiceID != 0x0000000001061C06 || req.LocalQPN != 0x21 || req.StartingPSN != 0x18d56a {
		t.Errorf("REQ service %#x qpn %#x psn %#x", req.ServiceID, req.LocalQPN, req.StartingPSN)
	}
	hdr, _, err := ParseCMAHeader(req.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	want := CMAHeader{SrcPort: 0xd876, Src: client, Dst: server}
	if diff := cmp.Diff(want, hdr, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("cma_hdr (-want +got):\n%s", diff)
	}
	re, err := hdr.Append(nil)
	if err != nil || !bytes.Equal(re, req.PrivateData[:CMAHeaderLen]) {
		t.Errorf("cma_hdr re-encoding %x, %v", re, err)
	}
	var rep REP
	if err := rep.Parse(mads[1].pkt.Payload); err != nil {
		t.Fatal(err)
	}
	if rep.StartingPSN != 0xc842d8 || rep.LocalQPN != 0x21 || rep.RemoteCommID != req.LocalCommID {
		t.Errorf("REP %+v", rep)
	}
}

// TestCaptureUDaddy checks the SIDR exchange of udaddy.
func TestCaptureUDaddy(t *testing.T) {
	frames := readRoCE(t, "udaddy.pcap")
	mads := cmMADs(t, "udaddy.pcap")
	if len(mads) != 2 {
		t.Fatalf("%d MADs, want SIDR_REQ + SIDR_REP", len(mads))
	}
	var req SIDRREQ
	if err := req.Parse(mads[0].pkt.Payload); err != nil {
		t.Fatal(err)
	}
	var rep SIDRREP
	if err := rep.Parse(mads[1].pkt.Payload); err != nil {
		t.Fatal(err)
	}
	if req.ServiceID != ServiceID(PortSpaceUDP, 7174) || req.PKey != 0xFFFF {
		t.Errorf("SIDR_REQ %+v", req.Header)
	}
	hdr, user, err := ParseCMAHeader(req.PrivateData)
	if err != nil || hdr.Src != client || hdr.Dst != server || len(user) != MaxSIDRREQUserData {
		t.Errorf("cma_hdr %+v %v", hdr, err)
	}
	if rep.RequestID != req.RequestID || rep.TID != req.TID || rep.Status != SIDRSuccess ||
		rep.QKey != UDPQKey || rep.ServiceID != req.ServiceID || len(rep.ValidAddInfo()) != 0 {
		t.Errorf("SIDR_REP %+v", rep)
	}
	// The client sends its UD data to the QPN the SIDR_REP announced.
	var seen bool
	for _, f := range frames {
		if f.src == client && f.pkt.BTH.DestQP != 1 {
			seen = true
			if f.pkt.BTH.DestQP != rep.QPN || f.pkt.DETH.QKey != UDPQKey {
				t.Errorf("client UD data to QP %#x qkey %#x; SIDR_REP QPN %#x", f.pkt.BTH.DestQP, f.pkt.DETH.QKey, rep.QPN)
			}
		}
	}
	if !seen {
		t.Error("no UD data from the client")
	}
}
