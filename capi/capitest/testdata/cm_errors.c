/* cm_errors.c: rdma_cm's failure paths through the library, in one process
 * (a listener and clients on one device): a port nobody listens on
 * (REJECTED, status 8: invalid service ID), a rejected request (REJECTED,
 * status 28, the server's private data), an accepted connection with
 * private data both ways and a disconnect (DISCONNECTED on both sides),
 * a destroyed ID with its events outstanding, O_NONBLOCK on the channel fd
 * (EAGAIN), ECE both ways and rdma_reject_ece (status 35), the device's PD
 * shared by every ID (an MR on the listener's pd serves an accepted QP),
 * rdma_create_qp making only the CQ a program left out and writing back
 * the CQs it used (as librdmacm), an SRQ on an ID (rdma_create_srq,
 * rdma_post_recv and rdma_get_recv_comp through it), and rsockets'
 * errors and a non-blocking rsocket connection. Prints "ok NAME" or "FAIL NAME: why";
 * exits with the number of failures. Argument: the device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include "cmcheck.h"
#include <rdma/rsocket.h>

/* client makes an ID resolved toward port, with a QP. */
static struct rdma_cm_id *client(const char *name, uint16_t port)
{
	struct rdma_cm_id *id = resolved(name, port);
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };

	if (!id)
		return NULL;
	/* As librdmacm: every ID on a device hands out the device's PD. */
	if (!id->pd || id->pd->context != id->verbs)
		FAIL(name, "id->pd %p after the address resolved", (void *)id->pd);
	if (rdma_create_qp(id, NULL, &qa)) {
		FAIL(name, "create_qp: %s", strerror(errno));
		return NULL;
	}
	return id;
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen_id, *c, *srv;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	uint16_t port = 9000 + (getpid() % 1000);
	const char *name;

	if (argc < 2)
		return 2;
	addr.sin_family = AF_INET;
	inet_pton(AF_INET, argv[1], &addr.sin_addr);
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	addr.sin_port = htons(port);
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 8)) {
		printf("FAIL setup: bind/listen: %s\n", strerror(errno));
		return 1;
	}
	if (!listen_id->verbs || !listen_id->pd || listen_id->pd->context != listen_id->verbs)
		FAIL("bind", "id->verbs %p, id->pd %p after rdma_bind_addr", (void *)listen_id->verbs, (void *)listen_id->pd);
	else
		OK("bind");

	name = "nonblock";
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	if (rdma_get_cm_event(ch, &ev) != -1 || errno != EAGAIN)
		FAIL(name, "empty channel: errno %d, want EAGAIN", errno);
	else
		OK(name);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK);

	/* A port nobody listens on. */
	name = "no_listener";
	if ((c = client(name, port + 1))) {
		if (rdma_connect(c, NULL))
			FAIL(name, "connect: %s", strerror(errno));
		else if ((ev = expect(name, RDMA_CM_EVENT_REJECTED))) {
			if (ev->status != 8)
				FAIL(name, "status %d, want 8 (invalid service ID)", ev->status);
			else
				OK(name);
			rdma_ack_cm_event(ev);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}

	/* A rejected request: the server's private data reaches the client. */
	name = "rejected";
	if ((c = client(name, port))) {
		memset(&cp, 0, sizeof(cp));
		rdma_connect(c, &cp);
		if ((ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST))) {
			srv = ev->id;
			rdma_ack_cm_event(ev);
			rdma_reject(srv, "no", 3);
			if ((ev = expect(name, RDMA_CM_EVENT_REJECTED))) {
				if (ev->status != 28 || ev->param.conn.private_data_len < 3 ||
				    memcmp(ev->param.conn.private_data, "no", 3))
					FAIL(name, "status %d private data %.3s, want 28 and \"no\"", ev->status,
					     ev->param.conn.private_data ? (const char *)ev->param.conn.private_data : "");
				else
					OK(name);
				rdma_ack_cm_event(ev);
			}
			rdma_destroy_id(srv);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}

	/* Accept with private data both ways, then disconnect. */
	name = "connect_disconnect";
	if ((c = client(name, port))) {
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		int est = 0, disc = 0, i;
		memset(&cp, 0, sizeof(cp));
		cp.private_data = "hello";
		cp.private_data_len = 6;
		cp.responder_resources = 1;
		cp.initiator_depth = 1;
		cp.retry_count = 7;
		cp.rnr_retry_count = 7;
		rdma_connect(c, &cp);
		if ((ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST))) {
			srv = ev->id;
			if (ev->param.conn.private_data_len < 6 || memcmp(ev->param.conn.private_data, "hello", 6))
				FAIL(name, "request's private data lost");
			if (ev->listen_id != listen_id || !srv->verbs)
				FAIL(name, "request: listen_id %p (want %p), verbs %p", (void *)ev->listen_id, (void *)listen_id,
				     (void *)srv->verbs);
			if (srv->pd != listen_id->pd || c->pd != listen_id->pd)
				FAIL(name, "PDs: request's %p, listener's %p, client's %p: want one, the device's",
				     (void *)srv->pd, (void *)listen_id->pd, (void *)c->pd);
			rdma_ack_cm_event(ev);
			if (rdma_create_qp(srv, NULL, &qa))
				FAIL(name, "server create_qp: %s", strerror(errno));
			else if (srv->qp->pd != srv->pd || !srv->send_cq || !srv->recv_cq || srv->send_cq == srv->recv_cq)
				FAIL(name, "server QP: pd %p (id's %p), CQs %p %p", (void *)srv->qp->pd, (void *)srv->pd,
				     (void *)srv->send_cq, (void *)srv->recv_cq);
			/* A buffer registered once on the listener's pd serves the
			 * accepted connection's QP, as with librdmacm. */
			static char rbuf[64], sbuf[64] = "shared pd";
			struct ibv_mr *rmr = ibv_reg_mr(listen_id->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
			struct ibv_mr *smr = ibv_reg_mr(c->pd, sbuf, sizeof(sbuf), 0);
			struct ibv_sge rsge = { .addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = rmr ? rmr->lkey : 0 };
			struct ibv_sge ssge = { .addr = (uintptr_t)sbuf, .length = 10, .lkey = smr ? smr->lkey : 0 };
			struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rsge, .num_sge = 1 }, *rbad;
			struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
						   .send_flags = IBV_SEND_SIGNALED }, *sbad;
			if (!rmr || !smr || !srv->qp || ibv_post_recv(srv->qp, &rwr, &rbad))
				FAIL(name, "shared pd: register or post recv: %s", strerror(errno));
			cp.private_data = "world";
			if (rdma_accept(srv, &cp))
				FAIL(name, "accept: %s", strerror(errno));
			for (i = 0; i < 2 && (ev = next()); i++) {
				if (ev->event == RDMA_CM_EVENT_ESTABLISHED)
					est++;
				if (ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == c &&
				    (ev->param.conn.private_data_len < 6 || memcmp(ev->param.conn.private_data, "world", 6)))
					FAIL(name, "reply's private data lost");
				rdma_ack_cm_event(ev);
			}
			if (rmr && smr && srv->qp && c->qp && ibv_post_send(c->qp, &swr, &sbad) == 0) {
				struct ibv_wc wc;
				int got = 0, t;
				for (t = 0; t < 100000 && !got; t++) {
					got = ibv_poll_cq(srv->recv_cq, 1, &wc);
					if (!got)
						usleep(50);
				}
				if (got != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 7 || strcmp(rbuf, "shared pd"))
					FAIL(name, "shared pd: receive %d, status %s, data \"%.10s\"", got,
					     got == 1 ? ibv_wc_status_str(wc.status) : "-", rbuf);
				else
					OK("shared_pd");
				for (t = 0; t < 100000 && ibv_poll_cq(c->send_cq, 1, &wc) == 0; t++)
					usleep(50);
			} else
				FAIL(name, "shared pd: post send: %s", strerror(errno));
			rdma_disconnect(c);
			for (i = 0; i < 2 && (ev = next()); i++) {
				if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
					disc++;
				rdma_ack_cm_event(ev);
			}
			if (est != 2 || disc != 2)
				FAIL(name, "%d ESTABLISHED and %d DISCONNECTED, want 2 and 2", est, disc);
			else
				OK(name);
			rdma_destroy_qp(srv);
			rdma_destroy_id(srv);
			if (rmr)
				ibv_dereg_mr(rmr);
			if (smr)
				ibv_dereg_mr(smr);
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}

	/* rdma_create_qp makes a CQ (and its channel) only for the queue given
	 * none, as librdmacm; the PD is the ID's. */
	name = "own_send_cq";
	{
		struct rdma_cm_id *id = NULL;
		struct sockaddr_in dst = addr;
		struct ibv_cq *cq = ibv_create_cq(listen_id->verbs, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = { .send_cq = cq, .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		dst.sin_port = htons(port);
		if (!cq || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) ||
		    !(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED)))
			FAIL(name, "set-up: %s", strerror(errno));
		else {
			rdma_ack_cm_event(ev);
			if (rdma_create_qp(id, NULL, &qa))
				FAIL(name, "create_qp: %s", strerror(errno));
			else if (qa.recv_cq != id->recv_cq || qa.send_cq != cq)
				FAIL(name, "the program's attributes: recv_cq %p (want the ID's %p), send_cq %p (want %p)",
				     (void *)qa.recv_cq, (void *)id->recv_cq, (void *)qa.send_cq, (void *)cq);
			else if (id->send_cq || id->send_cq_channel || !id->recv_cq || !id->recv_cq_channel ||
				 id->qp->send_cq != cq || id->qp->recv_cq != id->recv_cq || id->qp->pd != id->pd)
				FAIL(name, "id's send CQ %p channel %p, recv CQ %p channel %p; QP's %p %p",
				     (void *)id->send_cq, (void *)id->send_cq_channel, (void *)id->recv_cq,
				     (void *)id->recv_cq_channel, (void *)id->qp->send_cq, (void *)id->qp->recv_cq);
			else if (rdma_create_qp(id, NULL, &qa) != -1 || errno != EINVAL)
				FAIL(name, "a second create_qp: errno %d, want EINVAL", errno);
			else
				OK(name);
			rdma_destroy_qp(id);
		}
		if (id)
			rdma_destroy_id(id);
		if (cq)
			ibv_destroy_cq(cq);
	}

	/* An SRQ on an ID (rdma_create_srq): on the ID's PD, given to the QP
	 * rdma_create_qp makes, posted to by rdma_post_recv and read by
	 * rdma_get_recv_comp; an XRC SRQ is refused. */
	name = "srq";
	{
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_srq_init_attr_ex xa = { .comp_mask = IBV_SRQ_INIT_ATTR_TYPE, .srq_type = IBV_SRQT_XRC };
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_send_sge = 1 } };
		struct ibv_qp_init_attr sq = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		static char rbuf[64], sbuf[64] = "via srq";
		struct ibv_mr *rmr = NULL, *smr = NULL;
		struct sockaddr_in dst = addr;
		struct ibv_wc wc;
		int est = 0, i;
		c = srv = NULL;
		dst.sin_port = htons(port);
		memset(&cp, 0, sizeof(cp));
		cp.retry_count = 7;
		cp.rnr_retry_count = 7;
		if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) || rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) ||
		    !(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED)))
			FAIL(name, "resolve: %s", strerror(errno));
		else if (rdma_ack_cm_event(ev), rdma_resolve_route(c, 2000) || !(ev = expect(name, RDMA_CM_EVENT_ROUTE_RESOLVED)))
			FAIL(name, "route: %s", strerror(errno));
		else if (rdma_ack_cm_event(ev), rdma_create_srq_ex(c, &xa) != -1 || errno != EOPNOTSUPP)
			FAIL(name, "XRC SRQ: errno %d, want EOPNOTSUPP", errno);
		else if (rdma_create_srq(c, NULL, &sa) || !c->srq || c->srq->pd != c->pd)
			FAIL(name, "create_srq: %s (srq %p)", strerror(errno), (void *)c->srq);
		else if (rdma_create_srq(c, NULL, &sa) != -1 || errno != EINVAL)
			FAIL(name, "a second SRQ: errno %d, want EINVAL", errno);
		else if (rdma_create_qp(c, NULL, &qa) || c->qp->srq != c->srq)
			FAIL(name, "create_qp: %s (QP's srq %p, ID's %p)", strerror(errno), c->qp ? (void *)c->qp->srq : NULL,
			     (void *)c->srq);
		else if (!(rmr = rdma_reg_msgs(c, rbuf, sizeof(rbuf))) || rdma_post_recv(c, (void *)1, rbuf, sizeof(rbuf), rmr))
			FAIL(name, "post recv to the SRQ: %s", strerror(errno));
		else if (rdma_connect(c, &cp))
			FAIL(name, "connect: %s", strerror(errno));
		else if ((ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST))) {
			srv = ev->id;
			rdma_ack_cm_event(ev);
			if (rdma_create_qp(srv, NULL, &sq) || rdma_accept(srv, &cp))
				FAIL(name, "accept: %s", strerror(errno));
			for (i = 0; i < 2 && (ev = next()); i++) {
				est += ev->event == RDMA_CM_EVENT_ESTABLISHED;
				rdma_ack_cm_event(ev);
			}
			if (est != 2)
				FAIL(name, "%d ESTABLISHED, want 2", est);
			else if (!(smr = rdma_reg_msgs(srv, sbuf, sizeof(sbuf))) ||
				 rdma_post_send(srv, (void *)2, sbuf, 8, smr, IBV_SEND_SIGNALED) ||
				 rdma_get_send_comp(srv, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
				FAIL(name, "server send: %s", strerror(errno));
			else if (rdma_get_recv_comp(c, &wc) != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 1 ||
				 strcmp(rbuf, "via srq"))
				FAIL(name, "receive through the SRQ: status %s, data \"%.8s\"", ibv_wc_status_str(wc.status), rbuf);
			else
				OK(name);
			rdma_disconnect(srv);
			for (i = 0; i < 2 && (ev = next()); i++)
				rdma_ack_cm_event(ev);
			rdma_destroy_qp(srv);
			rdma_destroy_id(srv);
		}
		if (smr)
			rdma_dereg_mr(smr);
		if (c) {
			rdma_destroy_ep(c); /* its QP and SRQ too */
			if (rmr)
				rdma_dereg_mr(rmr);
		}
	}

	/* ECE: the client's rdma_set_local_ece reaches the server's
	 * rdma_get_remote_ece through the REQ; the server's options come back
	 * in the REP with the client's vendor ID. The QPs are the programs'
	 * own (ibv_create_qp, as perftest does): rdma_create_qp would replace
	 * the ECE with the QP's (none, as on rxe). Then rdma_reject_ece. */
	for (int rej = 0; rej < 2; rej++) {
		struct ibv_ece e = { .vendor_id = 0x02c9, .options = 0x80000003 }, got;
		struct ibv_pd *pd = ibv_alloc_pd(listen_id->verbs);
		struct ibv_cq *cq = ibv_create_cq(listen_id->verbs, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
		struct ibv_qp *cq_qp = ibv_create_qp(pd, &qa), *sq_qp = ibv_create_qp(pd, &qa);
		struct sockaddr_in dst = addr;
		name = rej ? "reject_ece" : "ece";
		c = NULL;
		dst.sin_port = htons(port);
		if (!cq_qp || !sq_qp || rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) || !(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED))) {
			FAIL(name, "set-up: %s", strerror(errno));
			break;
		}
		rdma_ack_cm_event(ev);
		if (rdma_resolve_route(c, 2000) || !(ev = expect(name, RDMA_CM_EVENT_ROUTE_RESOLVED)))
			break;
		rdma_ack_cm_event(ev);
		struct ibv_ece zero = { .vendor_id = 0 };
		if (rdma_set_local_ece(c, &zero) != -1 || errno != EINVAL)
			FAIL(name, "set_local_ece with vendor 0: errno %d, want EINVAL", errno);
		if (rdma_set_local_ece(c, &e))
			FAIL(name, "set_local_ece: %s", strerror(errno));
		memset(&cp, 0, sizeof(cp));
		cp.qp_num = cq_qp->qp_num;
		cp.retry_count = 7;
		rdma_connect(c, &cp);
		if (!(ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST)))
			break;
		srv = ev->id;
		rdma_ack_cm_event(ev);
		if (rdma_get_remote_ece(srv, &got) || got.vendor_id != e.vendor_id || got.options != e.options)
			FAIL(name, "server's remote ECE %#x/%#x, want %#x/%#x", got.vendor_id, got.options, e.vendor_id, e.options);
		if (rej) {
			rdma_reject_ece(srv, NULL, 0);
			if ((ev = expect(name, RDMA_CM_EVENT_REJECTED))) {
				if (ev->status != 35)
					FAIL(name, "status %d, want 35 (vendor option not supported)", ev->status);
				else
					OK(name);
				rdma_ack_cm_event(ev);
			}
		} else {
			struct ibv_ece se = { .vendor_id = 0x02c9, .options = 5 };
			rdma_set_local_ece(srv, &se);
			cp.qp_num = sq_qp->qp_num;
			if (rdma_accept(srv, &cp))
				FAIL(name, "accept: %s", strerror(errno));
			if ((ev = expect(name, RDMA_CM_EVENT_CONNECT_RESPONSE))) {
				rdma_ack_cm_event(ev);
				if (rdma_get_remote_ece(c, &got) || got.vendor_id != e.vendor_id || got.options != 5)
					FAIL(name, "client's remote ECE %#x/%#x, want %#x/5", got.vendor_id, got.options, e.vendor_id);
				else
					OK(name);
			}
		}
		rdma_destroy_id(srv);
		rdma_destroy_id(c);
		ibv_destroy_qp(cq_qp);
		ibv_destroy_qp(sq_qp);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
		/* What the teardown queued (DISCONNECTED, TIMEWAIT_EXIT). */
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		usleep(100000);
		while (rdma_get_cm_event(ch, &ev) == 0)
			rdma_ack_cm_event(ev);
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK);
	}

	/* Destroy an ID whose connect request is still unread by the server,
	 * then the listener with it pending: no crash, no hang. */
	name = "destroy_with_events";
	if ((c = client(name, port))) {
		rdma_connect(c, NULL);
		usleep(200000);
		rdma_destroy_qp(c);
		if (rdma_destroy_id(c))
			FAIL(name, "destroy_id: %s", strerror(errno));
		else if (rdma_destroy_id(listen_id))
			FAIL(name, "destroy listener: %s", strerror(errno));
		else
			OK(name);
	}
	/* rsockets' errors, as librdmacm sets them. */
	name = "rsocket errors";
	{
		struct sockaddr_in dst = addr;
		int fd, err = 0;
		char b[4];
		dst.sin_port = htons(port + 2);
		errno = 0;
		if (rsocket(AF_UNIX, SOCK_STREAM, 0) != -1 || errno != ENOTSUP)
			{
				FAIL(name, "rsocket(AF_UNIX): errno %d, want ENOTSUP", errno);
				err = 1;
			}
		fd = rsocket(AF_INET, SOCK_STREAM, 0);
		errno = 0;
		if (!err && (fd < 0 || rrecv(fd, b, sizeof b, 0) != -1 || errno != ENOTCONN))
			{
				FAIL(name, "rrecv before connecting: errno %d, want ENOTCONN", errno);
				err = 1;
			}
		errno = 0;
		if (!err && (rconnect(fd, (struct sockaddr *)&dst, sizeof dst) != -1 || errno != ECONNREFUSED))
			{
				FAIL(name, "rconnect to a port nobody listens on: errno %d, want ECONNREFUSED", errno);
				err = 1;
			}
		errno = 0;
		if (!err && (rsend(0, b, 1, 0) != -1 || errno != EBADF))
			{
				FAIL(name, "rsend on a descriptor that is no rsocket: errno %d, want EBADF", errno);
				err = 1;
			}
		if (fd >= 0)
			rclose(fd);
		if (!err)
			OK(name);
	}

	/* A connection within the process: non-blocking rconnect
	 * (EINPROGRESS, rpoll POLLOUT, SO_ERROR 0), raccept, EAGAIN from an
	 * empty non-blocking rrecv, rpoll mixing an rsocket with a pipe, and
	 * 0 from rrecv once the peer closed. */
	name = "rsocket nonblock";
	{
		struct sockaddr_in dst = addr;
		int l, c, s = -1, err = 0, e = -1, pfd[2];
		socklen_t len = sizeof e;
		char b[8];
		struct pollfd p[2];
		dst.sin_port = htons(port + 3);
		l = rsocket(AF_INET, SOCK_STREAM, 0);
		c = rsocket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || c < 0 || rbind(l, (struct sockaddr *)&dst, sizeof dst) || rlisten(l, 4))
			{
				FAIL(name, "listen: errno %d", errno);
				err = 1;
			}
		if (!err && rfcntl(c, F_SETFL, O_NONBLOCK))
			{
				FAIL(name, "rfcntl: errno %d", errno);
				err = 1;
			}
		errno = 0;
		if (!err && (rconnect(c, (struct sockaddr *)&dst, sizeof dst) != -1 || errno != EINPROGRESS))
			{
				FAIL(name, "non-blocking rconnect: errno %d, want EINPROGRESS", errno);
				err = 1;
			}
		p[0].fd = c;
		p[0].events = POLLOUT;
		if (!err && (rpoll(p, 1, 10000) != 1 || !(p[0].revents & POLLOUT)))
			{
				FAIL(name, "rpoll POLLOUT: revents %#x", p[0].revents);
				err = 1;
			}
		if (!err && (rgetsockopt(c, SOL_SOCKET, SO_ERROR, &e, &len) || e))
			{
				FAIL(name, "SO_ERROR %d", e);
				err = 1;
			}
		if (!err && (s = raccept(l, NULL, NULL)) < 0)
			{
				FAIL(name, "raccept: errno %d", errno);
				err = 1;
			}
		errno = 0;
		if (!err && (rrecv(c, b, sizeof b, 0) != -1 || errno != EAGAIN))
			{
				FAIL(name, "empty non-blocking rrecv: errno %d, want EAGAIN", errno);
				err = 1;
			}
		if (!err && pipe(pfd))
			err = 1;
		if (!err && rsend(s, "hello", 5, 0) != 5)
			{
				FAIL(name, "rsend: errno %d", errno);
				err = 1;
			}
		p[0].fd = pfd[0];
		p[0].events = POLLIN;
		p[1].fd = c;
		p[1].events = POLLIN;
		if (!err && (rpoll(p, 2, 10000) != 1 || p[0].revents || !(p[1].revents & POLLIN)))
			{
				FAIL(name, "rpoll POLLIN: revents %#x %#x", p[0].revents, p[1].revents);
				err = 1;
			}
		if (!err && (rrecv(c, b, sizeof b, 0) != 5 || memcmp(b, "hello", 5)))
			{
				FAIL(name, "rrecv: errno %d", errno);
				err = 1;
			}
		if (!err && (write(pfd[1], "x", 1) != 1 || rpoll(p, 2, 10000) != 1 || !(p[0].revents & POLLIN)))
			{
				FAIL(name, "rpoll on the pipe: revents %#x %#x", p[0].revents, p[1].revents);
				err = 1;
			}
		if (s >= 0)
			rclose(s);
		rfcntl(c, F_SETFL, 0);
		if (!err && rrecv(c, b, sizeof b, 0) != 0)
			{
				FAIL(name, "rrecv after the peer closed: errno %d, want 0", errno);
				err = 1;
			}
		if (!err)
			OK(name);
		rclose(c);
		rclose(l);
		if (!err) {
			close(pfd[0]);
			close(pfd[1]);
		}
	}

	/* Events of destroyed IDs may still be queued: take and ack them. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	while (rdma_get_cm_event(ch, &ev) == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_event_channel(ch);
	return failures;
}
