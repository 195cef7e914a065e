// Package pipeline moves data streams into PSRDADA rings (package dada): it
// registers a ring's blocks for RDMA and implements the senders and
// receivers behind "softroce dada send" and "softroce dada recv".
//
// # Registration
//
// RegisterRing registers the data blocks of an attached ring with a
// protection domain. A psrdada ring's blocks are separate System V segments,
// so one memory region over the whole ring needs the blocks back to back in
// this process: attach the ring with dada.LayoutContiguousTry (possible when
// the block size is a page multiple) and Auto registers one MR; otherwise it
// registers one MR per block. The choice is reported in RingMRs.Mode and
// Reason and can be forced with RegisterOptions.Mode. Block and Lookup give
// the lkey, rkey and address of any block or byte of the ring, which is what a
// receive loop needs to post receives into, or advertise, the current block.
//
// # Streams
//
// Two transports land a sender's stream in the receiver's ring:
//
//   - RoCE (RoCEReceiver, SendRoCE): RC queue pairs, connected over a small
//     TCP control connection that also carries the observation header and
//     the flow control. The receiver opens a ring block
//     (dada.Writer.OpenBlock), posts a receive for it and grants it to the
//     sender as a credit with the block's address and rkey; the sender
//     writes the block with one RDMA WRITE WITH IMMEDIATE (immediate = block
//     number), the data landing in place. Block b travels on QP b mod n
//     (default 4 QPs), so that several blocks are in flight although each
//     RC QP may have only 128 packets unacknowledged, as in rxe; the receiver
//     marks blocks filled in order, with the completion's byte count, and a
//     short (possibly empty) block ends the transfer. A reader that falls
//     behind holds back OpenBlock, hence the credits, hence the sender:
//     unread data is never overwritten. A sender that fails mid-transfer
//     leaves a transfer ended after its last complete block. With
//     RoCESendConfig.UseSend the block travels instead as SENDs into
//     receives the receiver posts on the block's chunks with the block's
//     lkey, as a classic verbs receive loop does (one receive per chunk). SendRoCE can also
//     relay a local ring (RoCESendConfig.Source), writing straight from its
//     blocks.
//   - UDP (RecvUDP, SendUDP): plain datagrams as telescope digitisers send
//     them, each with a sequence number at a configurable place in a packet
//     header (PacketFormat). The receiver places each payload into the block
//     the sequence number selects, zero-fills and counts lost packets,
//     accepts reordering within its window of open blocks, and ends the
//     observation after an idle timeout or a packet count. It receives with
//     recvmmsg, each datagram's payload scattered straight into the ring slot
//     of the next expected sequence number (one copy, by the kernel);
//     datagrams that arrive out of order are moved to their place. With UDP
//     GRO a run of datagrams arrives as one buffer, scattered the same way;
//     SendUDP uses UDP GSO. Neither path allocates per packet.
//
// Both keep live counters in a Stats struct, read while they run.
package pipeline
