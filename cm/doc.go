// Package cm is softroce's connection manager: the rdma_cm programming
// model in Go, speaking the InfiniBand CM protocol (package cm/mad) in MADs on
// each device's GSI QP (QP1), byte-compatible with the Linux kernel's ib_cm and
// rdma_cm over rxe. A softroce client can connect to a kernel rdma_cm server
// (rping, perftest -R, ...) and the other way round.
//
// # Layers
//
// An Agent runs the CM on one verbs.Device: it owns the GSI QP, sends and
// receives CM MADs, keeps transaction and communication IDs, retransmits
// lost MADs (Config.Timeout, Config.MaxRetries), answers duplicates
// idempotently (the same REP, RTU, DREP or REJ again), sends an MRA when the
// application is slow to accept, keeps closed connections in time-wait,
// bounds each listener's half-open connections as a SYN cache does, so that
// spoofed REQs cannot keep real peers out (ID.SetHalfOpen), and drops
// malformed or unexpected MADs, counting them in Stats. Attach starts
// one per device and registers it, so that addresses resolve to devices as
// rdma_cm resolves them through the GID table. NewAgent starts one outside
// that registry, with ports of its own: only its own methods reach it.
//
// The rdma_cm model mirrors librdmacm: an EventChannel
// (rdma_create_event_channel), IDs in the TCP (RC) and UDP (UD, through
// SIDR_REQ/SIDR_REP) port spaces (rdma_create_id), BindAddr, Listen,
// ResolveAddr, ResolveRoute, CreateQP (which moves the QP through
// INIT/RTR/RTS with the negotiated values, as rdma_cm does), Connect, Accept,
// Reject, Disconnect, and the events CONNECT_REQUEST, CONNECT_RESPONSE,
// ESTABLISHED, REJECTED, UNREACHABLE, CONNECT_ERROR, DISCONNECTED,
// TIMEWAIT_EXIT, ADDR_RESOLVED/ERROR and ROUTE_RESOLVED/ERROR.
//
// On top of it, Agent.Dial, Agent.Listen and Listener.Accept give a
// connected QP (with its CQs and PD) in one call, honouring context
// cancellation and deadlines; the package-level Dial and Listen do the same
// through the registered agent that the address selects:
//
//	c, err := cm.Dial(ctx, "10.0.0.2:7174", &cm.Options{PrivateData: hello})
//	// or, through one agent: agent.Dial(ctx, "10.0.0.2:7174", opts)
//	...
//	c.QP.PostSend(...)
//	c.Close() // DREQ/DREP, QP to ERR
//
// # Wire notes
//
// The REQ's Starting PSN is the PSN the passive side transmits with (the
// active side's receive PSN) and the REP's is the PSN the active side
// transmits with, as Linux cm.c/cma.c do (rdma_cm sets each side's rq_psn to
// the value it sent). Service IDs are (port space << 16) | port; the REQ and
// SIDR_REQ private data start with rdma_cm's 36-byte cma_hdr, so an rdma_cm
// user has 56 bytes of REQ private data (mad.MaxREQUserData).
//
// Replies go to the peer's IP address on UDP port 4791: the GSI QP learns the
// sender's address from the GRH area of the receive, which carries no UDP
// port, so devices on non-standard UDP ports cannot be reached by the CM.
package cm
