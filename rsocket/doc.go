// Package rsocket is librdmacm's rsockets in Go: stream sockets over RC
// QPs that speak rsocket.c's wire protocol byte for byte, so that a Go
// program and a C program using rsocket(3) (rstream, riostream, rcopy,
// or any application) talk to each other over softroce or a kernel's rxe.
//
// A connection is an RC QP set up through package cm, whose private data
// carries struct rs_conn_data (ConnData: version 1, credits, the target
// buffer list and the first half of the receive buffer, big-endian). Data
// moves as RDMA WRITE WITH IMMEDIATE into the peer's receive ring; the
// immediate (Msg) says what happened: OpData (bytes written), OpSGL
// (credits, with a new receive-buffer grant written into the sender's
// target list), OpIOMapSGL (a riomap entry written), OpCtrl (disconnect,
// shutdown). Grants and iomap entries are written in the receiver's byte
// order (RS_CONN_FLAG_NET says big-endian); this side declares
// little-endian. Sizes default to librdmacm's: 384-entry queues, 128 KiB
// buffers, 64-byte inline sends.
//
// Dial and Listen give a *Conn, a net.Conn (with deadlines, CloseWrite,
// non-blocking mode and Poll for the C library's rpoll); IOMap and
// IOWrite are riomap and riowrite.
//
// ListenPacket gives a datagram rsocket (SOCK_DGRAM, a *PacketConn, a
// net.PacketConn): rsocket.c's ds_* protocol, UD QPs beside a real UDP
// socket that carries the first datagrams to a peer and learns its QP
// (dsproto.go).
package rsocket
