// Package link defines how RoCEv2 datagrams enter and leave a softroce device:
// an Endpoint moves batches of caller-owned packet buffers (in the spirit of
// wireguard-go's conn.Bind). Implementations live in link/udp (real UDP
// sockets) and link/pipe (an in-memory pair with fault injection for tests).
package link
