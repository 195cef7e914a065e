/* cm_compat.c: librdmacm behaviour that programs rely on without saying so,
 * checked through the library in one process (a listener and clients on
 * one device): a connection made and accepted with no parameters gets the
 * device's RDMA READ depths (an RDMA READ then works); depths above the
 * device's are refused; the passive side's ESTABLISHED carries no private
 * data; the route's GIDs and P_Key; rdma_set_option's errnos;
 * rdma_destroy_id waits until the ID's events are acknowledged, and an
 * event acknowledged after its ID was destroyed is harmless;
 * rdma_migrate_id turns a synchronous ID asynchronous and back; and
 * rdma_accept on a synchronous UD ID returns; rdma_getaddrinfo's QP type
 * and port space defaults and its EAI_ return; rdma_create_qp_ex with the
 * ibv_wr_* send ops; rdma_disconnect after REJECTED; the channel's fd
 * readable exactly while events wait, after a burst too. Prints "ok NAME" or
 * "FAIL NAME: why"; exits with the number of failures. Argument: the
 * device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include "cmcheck.h"

static struct ibv_qp_init_attr qattr(void)
{
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	return qa;
}

/* defaults: rdma_connect and rdma_accept with no parameters give both QPs
 * the device's RDMA READ depths (librdmacm's rule), so an RDMA READ works;
 * the passive ESTABLISHED has no private data. */
static void test_defaults(struct rdma_cm_id *listen_id, uint16_t port)
{
	const char *name = "defaults";
	struct rdma_cm_id *c = resolved(name, port), *srv = NULL;
	struct ibv_qp_init_attr qa = qattr(), init;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr at;
	static char src[64] = "read me", dst[64];
	struct ibv_mr *smr = NULL, *dmr = NULL;
	struct ibv_wc wc;
	int i, est = 0, passive_pdata = -1;

	if (!c)
		return;
	if (rdma_create_qp(c, NULL, &qa) || rdma_connect(c, NULL)) {
		FAIL(name, "client: %s", strerror(errno));
		goto out;
	}
	if (!(ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST)))
		goto out;
	srv = ev->id;
	rdma_ack_cm_event(ev);
	qa = qattr();
	if (rdma_create_qp(srv, NULL, &qa) || !(smr = rdma_reg_read(srv, src, sizeof(src))) || rdma_accept(srv, NULL)) {
		FAIL(name, "server: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < 2 && (ev = next_on(ch)); i++) {
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			est++;
			if (ev->id == srv)
				passive_pdata = ev->param.conn.private_data_len;
		}
		rdma_ack_cm_event(ev);
	}
	if (est != 2) {
		FAIL(name, "%d ESTABLISHED, want 2", est);
		goto out;
	}
	if (passive_pdata != 0)
		FAIL("passive_established", "private_data_len %d, want 0 (the kernel reports the RTU with none)", passive_pdata);
	else
		OK("passive_established");
	if (ibv_query_qp(c->qp, &at, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init) ||
	    at.max_rd_atomic == 0 || at.max_dest_rd_atomic == 0)
		FAIL(name, "client QP: max_rd_atomic %d, max_dest_rd_atomic %d, want the device's", at.max_rd_atomic,
		     at.max_dest_rd_atomic);
	else if (ibv_query_qp(srv->qp, &at, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init) ||
		 at.max_rd_atomic == 0 || at.max_dest_rd_atomic == 0)
		FAIL(name, "server QP: max_rd_atomic %d, max_dest_rd_atomic %d, want the device's", at.max_rd_atomic,
		     at.max_dest_rd_atomic);
	else if (!(dmr = rdma_reg_msgs(c, dst, sizeof(dst))) ||
		 rdma_post_read(c, NULL, dst, sizeof(dst), dmr, IBV_SEND_SIGNALED, (uintptr_t)src, smr->rkey) ||
		 rdma_get_send_comp(c, &wc) != 1 || wc.status != IBV_WC_SUCCESS || strcmp(dst, "read me"))
		FAIL(name, "RDMA READ: %s, status %s", strerror(errno), ibv_wc_status_str(wc.status));
	else
		OK(name);
out:
	if (srv) {
		rdma_disconnect(srv);
		for (i = 0; i < 2 && (ev = next_on(ch)); i++)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(srv);
		rdma_destroy_id(srv);
	}
	if (smr)
		rdma_dereg_mr(smr);
	if (dmr)
		rdma_dereg_mr(dmr);
	if (c) {
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	(void)listen_id;
}

/* depth_limits: a depth above the device's is refused (EINVAL), and an RC
 * connect needs parameters when the ID has no QP (ucma_valid_param). */
static void test_depth_limits(uint16_t port)
{
	const char *name = "depth_limits";
	struct rdma_cm_id *c = resolved(name, port);
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa = qattr();
	if (!c)
		return;
	errno = 0;
	if (rdma_connect(c, NULL) != -1 || errno != EINVAL)
		FAIL(name, "connect with no QP and no parameters: errno %d, want EINVAL", errno);
	else if (rdma_create_qp(c, NULL, &qa))
		FAIL(name, "create_qp: %s", strerror(errno));
	else {
		memset(&cp, 0, sizeof(cp));
		cp.responder_resources = 200;
		errno = 0;
		if (rdma_connect(c, &cp) != -1 || errno != EINVAL)
			FAIL(name, "responder_resources 200: errno %d, want EINVAL", errno);
		else
			OK(name);
	}
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
}

/* route_gids: ADDR_RESOLVED leaves the route's GIDs (IPv4-mapped) and the
 * default P_Key, as ucma_query_route fills them. */
static void test_route_gids(uint16_t port)
{
	const char *name = "route_gids";
	struct rdma_cm_id *c = resolved(name, port);
	uint8_t want[16] = { [10] = 0xff, [11] = 0xff };
	struct rdma_ib_addr *ib;
	if (!c)
		return;
	memcpy(want + 12, &addr.sin_addr, 4);
	ib = &c->route.addr.addr.ibaddr;
	if (memcmp(ib->sgid.raw, want, 16) || memcmp(ib->dgid.raw, want, 16) || ib->pkey != htons(0xffff))
		FAIL(name, "sgid %02x..%02x, dgid %02x..%02x, pkey %#x", ib->sgid.raw[10], ib->sgid.raw[15],
		     ib->dgid.raw[10], ib->dgid.raw[15], ntohs(ib->pkey));
	else
		OK(name);
	rdma_destroy_id(c);
}

/* set_option: a known option of the wrong size is EINVAL, an unknown one
 * ENOSYS (the kernel's ucma_set_option_id). */
static void test_set_option(uint16_t port)
{
	const char *name = "set_option";
	struct rdma_cm_id *c = resolved(name, port);
	int v = 0;
	uint8_t tos = 32;
	if (!c)
		return;
	errno = 0;
	if (rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v, sizeof(v)) != -1 || errno != EINVAL)
		FAIL(name, "TOS of size 4: errno %d, want EINVAL", errno);
	else if (errno = 0, rdma_set_option(c, RDMA_OPTION_ID, 99, &v, sizeof(v)) != -1 || errno != ENOSYS)
		FAIL(name, "option 99: errno %d, want ENOSYS", errno);
	else if (rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)))
		FAIL(name, "TOS: %s", strerror(errno));
	else
		OK(name);
	rdma_destroy_id(c);
}

static volatile int acked;

static void *ack_later(void *ev)
{
	usleep(100000);
	acked = 1;
	rdma_ack_cm_event(ev);
	return NULL;
}

/* destroy_waits: rdma_destroy_id returns only after the ID's events handed
 * to the program are acknowledged (here by another thread, 100 ms later);
 * and a CONNECT_REQUEST acknowledged after its ID was rejected and
 * destroyed is harmless (it counts against the listener). */
static void test_destroy_waits(uint16_t port)
{
	const char *name = "destroy_waits";
	struct rdma_cm_id *c;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = addr;
	struct ibv_qp_init_attr qa = qattr();
	pthread_t t;

	dst.sin_port = htons(port);
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) || rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) ||
	    !(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED))) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	acked = 0;
	pthread_create(&t, NULL, ack_later, ev);
	rdma_destroy_id(c);
	if (!acked)
		FAIL(name, "rdma_destroy_id returned before its event was acknowledged");
	else
		OK(name);
	pthread_join(t, NULL);

	name = "ack_after_destroy";
	if (!(c = resolved(name, port)) || rdma_create_qp(c, NULL, &qa) || rdma_connect(c, NULL)) {
		FAIL(name, "client: %s", strerror(errno));
	} else if ((ev = expect(name, RDMA_CM_EVENT_CONNECT_REQUEST))) {
		rdma_reject(ev->id, NULL, 0);
		rdma_destroy_id(ev->id);
		if (rdma_ack_cm_event(ev))
			FAIL(name, "ack: %s", strerror(errno));
		else if ((ev = expect(name, RDMA_CM_EVENT_REJECTED))) {
			OK(name);
			rdma_ack_cm_event(ev);
		}
	}
	if (c) {
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
}

/* migrate: an ID from rdma_create_ep is synchronous until moved to a
 * channel; then its calls return at once and its events arrive there, and
 * destroying it leaves the program's channel alone. Moved to no channel,
 * it is synchronous again. */
static void test_migrate(const char *host, uint16_t port)
{
	const char *name = "migrate";
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res = NULL;
	struct rdma_event_channel *mine = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	char svc[16];

	snprintf(svc, sizeof(svc), "%u", port + 1); /* nobody listens there */
	if (!mine || rdma_getaddrinfo(host, svc, &hints, &res) || rdma_create_ep(&id, res, NULL, NULL)) {
		FAIL(name, "set-up: %s", strerror(errno));
		goto out;
	}
	if (rdma_migrate_id(id, mine) || id->channel != mine) {
		FAIL(name, "migrate to the program's channel: %s", strerror(errno));
		goto out;
	}
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x123;
	if (rdma_connect(id, &cp)) {
		FAIL(name, "an asynchronous connect: %s (it waited for its event)", strerror(errno));
		goto out;
	}
	if (!(ev = next_on(mine)) || ev->event != RDMA_CM_EVENT_REJECTED || ev->id != id) {
		FAIL(name, "event on the program's channel: %s", ev ? rdma_event_str(ev->event) : "none");
		if (ev)
			rdma_ack_cm_event(ev);
		goto out;
	}
	rdma_ack_cm_event(ev);
	if (rdma_migrate_id(id, NULL) || id->channel == mine || !id->channel)
		FAIL(name, "migrate to no channel: %s, channel %p", strerror(errno), (void *)id->channel);
	else if (rdma_migrate_id(id, NULL) != -1 || errno != EINVAL)
		FAIL(name, "a synchronous ID moved to no channel again: errno %d, want EINVAL", errno);
	else
		OK(name);
out:
	if (id)
		rdma_destroy_ep(id);
	if (mine) {
		if (fcntl(mine->fd, F_GETFD) == -1)
			FAIL(name, "the program's channel was closed by rdma_destroy_ep");
		rdma_destroy_event_channel(mine);
	}
	if (res)
		rdma_freeaddrinfo(res);
}

struct ud_server {
	struct rdma_cm_id *listen;
	volatile int done, err;
};

static void *ud_serve(void *arg)
{
	struct ud_server *s = arg;
	struct rdma_cm_id *cid;
	if (rdma_get_request(s->listen, &cid) || rdma_accept(cid, NULL))
		s->err = errno ? errno : -1;
	s->done = 1;
	return NULL;
}

/* ud_accept: rdma_accept on a synchronous UD ID returns (a SIDR_REP has no
 * event to wait for). */
static void test_ud_accept(const char *host, uint16_t port)
{
	const char *name = "ud_accept";
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_UDP, .ai_qp_type = IBV_QPT_UD }, *sres = NULL, *cres = NULL;
	struct ibv_qp_init_attr qa = qattr();
	struct rdma_cm_id *cl = NULL;
	struct ud_server s = { 0 };
	pthread_t t;
	char svc[16];
	int i;

	snprintf(svc, sizeof(svc), "%u", port + 2);
	hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(host, svc, &hints, &sres) || rdma_create_ep(&s.listen, sres, NULL, &qa) ||
	    rdma_listen(s.listen, 1)) {
		FAIL(name, "server set-up: %s", strerror(errno));
		goto out;
	}
	pthread_create(&t, NULL, ud_serve, &s);
	hints.ai_flags = 0;
	qa = qattr();
	if (rdma_getaddrinfo(host, svc, &hints, &cres) || rdma_create_ep(&cl, cres, NULL, &qa) || rdma_connect(cl, NULL))
		FAIL(name, "client: %s", strerror(errno));
	for (i = 0; i < 500 && !s.done; i++)
		usleep(10000);
	if (!s.done)
		FAIL(name, "rdma_accept on a synchronous UD ID did not return in 5 s");
	else if (s.err)
		FAIL(name, "server: errno %d", s.err);
	else {
		OK(name);
		pthread_join(t, NULL);
	}
out:
	if (cl)
		rdma_destroy_ep(cl);
	if (sres)
		rdma_freeaddrinfo(sres);
	if (cres)
		rdma_freeaddrinfo(cres);
}

/* create_qp_ex: rdma_create_qp_ex takes IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
 * (the ibv_wr_* API, as upstream perftest asks) and writes back the PD and
 * CQs it used; a QP from rdma_create_qp is no ibv_qp_ex (librdmacm's
 * attributes hold only the PD, and ibv_create_qp_ex then takes the plain
 * ibv_create_qp). */
static void test_create_qp_ex(uint16_t port)
{
	const char *name = "create_qp_ex";
	struct rdma_cm_id *c = resolved(name, port), *d = resolved(name, port);
	struct ibv_qp_init_attr_ex ax = { .comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_init_attr qa = qattr();
	struct ibv_qp_ex *qx;
	if (!c || !d)
		return;
	if (rdma_create_qp_ex(c, &ax))
		FAIL(name, "rdma_create_qp_ex with send ops: %s", strerror(errno));
	else if (!(qx = ibv_qp_to_qp_ex(c->qp)) || !qx->wr_start || !qx->wr_send)
		FAIL(name, "no ibv_wr_* ops on its QP");
	else if (ax.pd != c->pd || !(ax.comp_mask & IBV_QP_INIT_ATTR_PD) || ax.send_cq != c->send_cq || ax.recv_cq != c->recv_cq)
		FAIL(name, "written back: pd %p (ID's %p), CQs %p %p (ID's %p %p)", (void *)ax.pd, (void *)c->pd,
		     (void *)ax.send_cq, (void *)ax.recv_cq, (void *)c->send_cq, (void *)c->recv_cq);
	else if (rdma_create_qp(d, NULL, &qa) || ibv_qp_to_qp_ex(d->qp))
		FAIL(name, "rdma_create_qp's QP: %s, qp_ex %p, want none", strerror(errno), (void *)ibv_qp_to_qp_ex(d->qp));
	else
		OK(name);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_qp(d);
	rdma_destroy_id(d);
}

/* disconnect_after_reject: rdma_disconnect on an ID whose connect was
 * rejected answers 0, as the kernel's, and moves its QP to the error
 * state; on an ID that never connected it is EINVAL. */
static void test_disconnect_after_reject(uint16_t port)
{
	const char *name = "disconnect_after_reject";
	struct rdma_cm_id *c = resolved(name, port + 3), *d = resolved(name, port); /* port + 3: nobody listens */
	struct ibv_qp_init_attr qa = qattr(), init;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr at;
	if (!c || !d)
		return;
	if (rdma_create_qp(c, NULL, &qa) || rdma_connect(c, NULL))
		FAIL(name, "connect: %s", strerror(errno));
	else if ((ev = expect(name, RDMA_CM_EVENT_REJECTED))) {
		rdma_ack_cm_event(ev);
		if (rdma_disconnect(c))
			FAIL(name, "rdma_disconnect after REJECTED: errno %d, want 0", errno);
		else if (ibv_query_qp(c->qp, &at, IBV_QP_STATE, &init) || at.qp_state != IBV_QPS_ERR)
			FAIL(name, "QP state %d after rdma_disconnect, want ERR", at.qp_state);
		else if (rdma_disconnect(d) != -1 || errno != EINVAL)
			FAIL(name, "rdma_disconnect on an ID that never connected: errno %d, want EINVAL", errno);
		else
			OK(name);
	}
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(d);
}

/* getaddrinfo: the QP type and the port space each follow from the other
 * when one is given (through the socket type and protocol), and a failed
 * lookup returns getaddrinfo's EAI_ code (librdmacm's addrinfo.c). */
static void test_getaddrinfo(const char *host)
{
	const char *name = "getaddrinfo";
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_UDP }, *res = NULL;
	int r;
	if (rdma_getaddrinfo(host, "7471", &hints, &res) || res->ai_qp_type != IBV_QPT_UD)
		FAIL(name, "port space UDP: %s, QP type %d, want UD", strerror(errno), res ? res->ai_qp_type : -1);
	else {
		rdma_freeaddrinfo(res);
		res = NULL;
		memset(&hints, 0, sizeof(hints));
		hints.ai_qp_type = IBV_QPT_UD;
		if (rdma_getaddrinfo(host, "7471", &hints, &res) || res->ai_port_space != RDMA_PS_UDP)
			FAIL(name, "QP type UD: %s, port space %d, want UDP", strerror(errno), res ? (int)res->ai_port_space : -1);
		else {
			memset(&hints, 0, sizeof(hints));
			hints.ai_flags = RAI_NUMERICHOST;
			if ((r = rdma_getaddrinfo("not-an-address", "7471", &hints, &res)) != EAI_NONAME)
				FAIL(name, "a bad numeric host: %d (%s), want EAI_NONAME", r, gai_strerror(r));
			else
				OK(name);
		}
	}
	if (res)
		rdma_freeaddrinfo(res);
}

/* level_burst: the channel's fd is readable exactly while events wait,
 * also after a blocking rdma_get_cm_event handled several requests on its
 * own thread and took the first of their events (the others must leave
 * the fd readable, or a poll on it would wait for ever), and not after
 * the last is taken. The requests are sent once this thread waits, three
 * times over: whether one wait handles several is up to timing. */
enum { LEVEL_N = 6 };
static struct rdma_cm_id *level_c[LEVEL_N];

static void *connect_all(void *arg)
{
	int i;
	usleep(20000);
	for (i = 0; i < LEVEL_N; i++)
		if (rdma_connect(level_c[i], NULL))
			printf("connect %d: %s\n", i, strerror(errno));
	return NULL;
}

static int level_round(const char *name, uint16_t port)
{
	enum { N = LEVEL_N };
	struct rdma_cm_id **c = level_c;
	struct rdma_cm_event *ev;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_qp_init_attr qa;
	pthread_t t;
	int i, got = 0, rejected = 0, ok = 0;

	memset(level_c, 0, sizeof(level_c));
	for (i = 0; i < N; i++) {
		qa = qattr();
		if (!(c[i] = resolved(name, port)) || rdma_create_qp(c[i], NULL, &qa)) {
			FAIL(name, "client %d: %s", i, strerror(errno));
			goto out;
		}
	}
	pthread_create(&t, NULL, connect_all, NULL);
	/* Blocking: this thread waits on the link and handles the requests.
	 * The clients' REJECTED events come among them. */
	for (i = 0; got < N; i++) {
		if (i > 0) {
			fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
			if (poll(&p, 1, 2000) != 1) {
				FAIL(name, "fd not readable within 2 s with %d of %d requests taken", got, N);
				break;
			}
		}
		if (rdma_get_cm_event(ch, &ev)) {
			FAIL(name, "get: %s", strerror(errno));
			break;
		}
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			got++;
			rdma_reject(ev->id, NULL, 0);
			rdma_destroy_id(ev->id);
		} else if (ev->event == RDMA_CM_EVENT_REJECTED) {
			rejected++;
		} else {
			FAIL(name, "event %s", rdma_event_str(ev->event));
			rdma_ack_cm_event(ev);
			break;
		}
		rdma_ack_cm_event(ev);
	}
	if (got == N) {
		while (rejected < N && (ev = next())) {
			rejected += ev->event == RDMA_CM_EVENT_REJECTED;
			rdma_ack_cm_event(ev);
		}
		if (rejected < N)
			FAIL(name, "%d of %d REJECTED", rejected, N);
		else if (poll(&p, 1, 0) != 0)
			FAIL(name, "fd readable with no event waiting");
		else
			ok = 1;
	}
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK);
	pthread_join(t, NULL);
out:
	for (i = 0; i < N; i++)
		if (c[i]) {
			rdma_destroy_qp(c[i]);
			rdma_destroy_id(c[i]);
		}
	return ok;
}

static void test_level_burst(uint16_t port)
{
	int r;
	for (r = 0; r < 3; r++)
		if (!level_round("level_burst", port))
			return;
	OK("level_burst");
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen_id;
	uint16_t port = 12000 + (getpid() % 1000) * 4;
	struct rdma_cm_event *ev;

	if (argc < 2)
		return 2;
	addr.sin_family = AF_INET;
	inet_pton(AF_INET, argv[1], &addr.sin_addr);
	ch = rdma_create_event_channel();
	addr.sin_port = htons(port);
	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&addr) || rdma_listen(listen_id, 8)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	test_defaults(listen_id, port);
	test_depth_limits(port);
	test_route_gids(port);
	test_set_option(port);
	test_destroy_waits(port);
	test_migrate(argv[1], port);
	test_ud_accept(argv[1], port);
	test_getaddrinfo(argv[1]);
	test_create_qp_ex(port);
	test_disconnect_after_reject(port);
	test_level_burst(port);
	rdma_destroy_id(listen_id);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	while (rdma_get_cm_event(ch, &ev) == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_event_channel(ch);
	return failures;
}
