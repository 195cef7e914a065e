// Package oob implements, byte for byte, the out-of-band exchanges that the
// real RDMA test tools use to connect their queue pairs without a connection
// manager, plus rping's buffer advertisement:
//
//   - rdma-core's ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
//     ibv_srq_pingpong (libibverbs/examples): a TCP connection (port 18515)
//     carrying "LID:QPN:PSN:GID" text messages of 52 bytes (PingpongDest,
//     ClientExchange, ServerExchange);
//   - perftest 4.5 (Debian bookworm's 4.5+0.17, VERSION "6.06"): the TCP side
//     channel of ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw and the
//     *_lat tools (PerftestConn, PerftestDest, PerftestPlan);
//   - rping's and krping's struct rping_rdma_info / krping_rdma_info, the
//     16-byte buffer advertisement sent as an RDMA SEND (RDMAInfo), and
//     rping's ping data pattern (RpingFill).
//
// Every exchange takes a context: its deadline bounds the socket I/O and its
// cancellation interrupts it. Decoders return *Error values (errors.Is with
// the Err* sentinels) for malformed input and never panic. The message
// formats and sequences are documented on each type and were checked against
// the TCP payloads of the kernel rxe captures in the repository's
// testdata/captures (reduced copies in testdata).
package oob
