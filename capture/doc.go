// Package capture reads and writes RoCEv2 traffic as pcap files.
//
// A Writer records RoCEv2 datagrams (UDP payloads, BTH through ICRC) in the
// classic pcap format with LINKTYPE_ETHERNET, synthesising Ethernet, IPv4 or
// IPv6 and UDP headers as kernel rxe sends them (IPv4 ID 0 with DF, UDP
// checksum 0, destination port 4791) and rewriting the ICRC so that it is
// valid for the synthesised headers. Wireshark's InfiniBand dissector decodes
// the result. It can also record whole frames captured from an interface.
//
// A Reader walks any pcap or pcapng file (as written by tcpdump, Wireshark,
// ibdump or this package) and returns the RoCEv2 datagrams in it: it parses
// Ethernet (with or without 802.1Q/802.1ad tags), Linux cooked captures
// (SLL and SLL2, as "tcpdump -i any" writes), raw IP and BSD loopback
// framing, IPv4 and IPv6, and skips every frame that is not UDP to a RoCEv2
// port. Reading does not allocate per packet.
//
// On Linux, OpenLive captures RoCEv2 frames from a network interface with an
// AF_PACKET socket and an in-kernel filter, as tcpdump and ibdump do.
package capture
