/* cm_errors.c: rdma_cm's failure paths through the library, in one process
 * (a listener and clients on one device): a port nobody listens on
 * (REJECTED, status 8: invalid service ID), a rejected request (REJECTED,
 * status 28, the server's private data), an accepted connection with
 * private data both ways and a disconnect (DISCONNECTED on both sides),
 * a destroyed ID with its events outstanding, O_NONBLOCK on the channel fd
 * (EAGAIN), ECE both ways and rdma_reject_ece (status 35), and a call not
 * served yet (rsocket: ENOSYS). Prints "ok NAME" or "FAIL NAME: why";
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
#include <rdma/rsocket.h>

static int failures;
static struct sockaddr_in addr;
static struct rdma_event_channel *ch;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

/* next waits up to 10 s for an event. */
static struct rdma_cm_event *next(void)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 10000) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

/* expect takes the next event and checks its type. */
static struct rdma_cm_event *expect(const char *name, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next();
	if (!ev) {
		FAIL(name, "no event (want %s)", rdma_event_str(want));
		return NULL;
	}
	if (ev->event != want) {
		FAIL(name, "event %s status %d, want %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

static struct rdma_cm_id *client(const char *name, uint16_t port)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = addr;
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };

	dst.sin_port = htons(port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		FAIL(name, "create_id: %s", strerror(errno));
		return NULL;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) {
		FAIL(name, "resolve_addr: %s", strerror(errno));
		return NULL;
	}
	if (!(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return NULL;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || !(ev = expect(name, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return NULL;
	rdma_ack_cm_event(ev);
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
	if (!listen_id->verbs)
		FAIL("bind", "id->verbs not set after rdma_bind_addr");
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
			rdma_ack_cm_event(ev);
			if (rdma_create_qp(srv, NULL, &qa))
				FAIL(name, "server create_qp: %s", strerror(errno));
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
		}
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
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
	/* What is not served yet fails with ENOSYS (and says so on stderr). */
	name = "unsupported";
	errno = 0;
	if (rsocket(AF_INET, SOCK_STREAM, 0) != -1 || errno != ENOSYS)
		FAIL(name, "rsocket: errno %d, want -1 and ENOSYS", errno);
	else
		OK(name);

	/* Events of destroyed IDs may still be queued: take and ack them. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	while (rdma_get_cm_event(ch, &ev) == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_event_channel(ch);
	return failures;
}
