// Package mad encodes and decodes the InfiniBand Communication Manager (CM)
// management datagrams that the Linux kernel's ib_cm and rdma_cm exchange on
// the GSI QP (QP1) to set up and tear down connections over RoCE: REQ, MRA,
// REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, LAP and APR, each exactly as
// IBTA volume 1 chapter 12 lays it out (the same offsets as Linux's
// include/rdma/ibta_vol1_c12.h; see docs/protocol.md §8.1).
//
// A CM MAD is always 256 bytes: a 24-byte MAD common header (Header) followed
// by the message. It travels as the payload of a UD SEND_ONLY to QP1 with
// Q_Key 0x80010000; the BTH/DETH around it are the business of package wire.
//
// Every message type has Parse, which decodes a whole 256-byte MAD in place
// without allocating (PrivateData and the other byte arrays alias the input),
// and Append, which appends the 256-byte encoding. Reserved bits are ignored
// on Parse and written as zero by Append, so Append(Parse(b)) reproduces b
// except for reserved bits. Integer fields narrower than their Go type are
// truncated to their wire width by Append. Malformed input gives an *Error
// (compare with errors.Is against the Err* sentinels), never a panic.
//
// The package also carries what rdma_cm adds on top of the CM: the 36-byte
// cma_hdr at the start of REQ and SIDR_REQ private data (CMAHeader), service
// IDs built from a port space and a port (ServiceID), the rdma_cm private-data
// limits, RDMA_UDP_QKEY, and the CM reject reasons (RejectReason).
//
// Dispatch on an incoming MAD with ParseHeader, then call the Parse method of
// the type its AttrID names.
package mad
