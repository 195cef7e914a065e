//go:build linux && cgo && softroce_capi

// cm.h: librdmacm's private structs: the public struct first, so that a
// program's pointer is ours too.
#ifndef SOFTROCE_CM_H
#define SOFTROCE_CM_H

#include <rdma/rdma_cma.h>

struct sr_cm_channel {
	struct rdma_event_channel ch;
	uintptr_t h;
};

struct sr_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	int own_cqs; /* rdma_create_qp made the CQs (and their channels) */
	int conn_started; /* rdma_connect was called, or a request made the ID */
	/* A synchronous ID (no channel given): each call waits for its event on
	 * a channel of the ID's own, as librdmacm's. */
	int sync;
	/* rdma_create_ep on a passive ID: the QP rdma_get_request creates. */
	int has_ep_attr;
	struct ibv_qp_init_attr ep_attr;
	struct ibv_pd *ep_pd;
	/* Enhanced Connection Establishment, as librdmacm keeps it: this
	 * side's (rdma_set_local_ece; sent in the REQ, its options in the REP)
	 * and the peer's (from its REQ or REP; rdma_get_remote_ece). */
	struct ibv_ece local_ece, remote_ece;
	/* The events handed to the program that count against this ID (its
	 * own; a CONNECT_REQUEST counts against its listener, as librdmacm's)
	 * and those acknowledged: rdma_destroy_id waits until they are equal,
	 * so that rdma_ack_cm_event never touches a freed ID. delivered is
	 * added to (atomically) only while the ID is live, acked under
	 * sr_ev_mu (sr_cm_acked, sr_cm_wait_acked; as the verbs objects'
	 * events_completed). */
	uint32_t delivered, acked;
};

/* An event and its private data, valid until rdma_ack_cm_event. */
struct sr_cm_event {
	struct rdma_cm_event ev;
	uint8_t pdata[256];
	struct sr_cm_id *counted; /* the ID it counts against until acknowledged */
};

struct ibv_context *sr_cm_ctx(int idx);
struct ibv_pd *sr_cm_pd(int idx);
void sr_cm_free_event(struct sr_cm_event *e);
int sr_cm_sync_event(struct rdma_cm_id *id, int ret);

#endif
