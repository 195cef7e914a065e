//go:build linux && cgo && softroce_capi

// rdmacm.c: librdmacm's C API over package cm (capi/cm.go): event channels
// on eventfds, IDs, address and route resolution, connect/listen/accept,
// the QP an ID owns (with CQs of its own when the program gives none, as
// rdma_verbs.h expects), rdma_getaddrinfo, ECE; multicast is in cmmcast.c,
// the rsocket calls, rpoll and rselect in rsocket.c. SRQs on IDs are not
// served yet: they fail with ENOSYS and say so once on stderr.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/eventfd.h>
#include <string.h>
#include <unistd.h>
#include <netdb.h>
#include <arpa/inet.h>

#include "capi.h"
#include "cm.h"
#include "_cgo_export.h"

#define SR_EXPORT __attribute__((visibility("default")))

SR_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const n[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((int)event < 0 || (int)event >= (int)(sizeof(n) / sizeof(n[0])))
		return "UNKNOWN EVENT";
	return n[event];
}

/* ---- the connection manager ---- */

static inline int sr_err(int e)
{
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

static inline uintptr_t sr_id_h(struct rdma_cm_id *id)
{
	return ((struct sr_cm_id *)id)->h;
}

/* The contexts rdma_cm IDs hand out as id->verbs: one per device, opened
 * on first use and kept for the process's life, as librdmacm's; and each
 * device's PD, which every ID on it hands out as id->pd from the moment
 * it has a device (librdmacm's cma_dev->pd): an MR registered on one ID's
 * pd serves the QPs of all of them, and rdma_create_qp with no PD uses it. */
static pthread_mutex_t sr_cm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *sr_cm_ctxs[SR_MAX_DEVICES];
static struct ibv_pd *sr_cm_pds[SR_MAX_DEVICES];

struct ibv_context *sr_cm_ctx(int idx)
{
	struct ibv_context *c;
	if (idx < 0 || idx >= SR_MAX_DEVICES)
		return NULL;
	pthread_mutex_lock(&sr_cm_mu);
	c = sr_cm_ctxs[idx];
	if (!c) {
		int n = 0;
		struct ibv_device **l = ibv_get_device_list(&n);
		if (l && idx < n)
			c = ibv_open_device(l[idx]);
		ibv_free_device_list(l);
		sr_cm_ctxs[idx] = c;
	}
	if (c && !sr_cm_pds[idx])
		sr_cm_pds[idx] = ibv_alloc_pd(c);
	pthread_mutex_unlock(&sr_cm_mu);
	return c;
}

/* sr_cm_pd is the PD of device idx's context (sr_cm_ctx made both). */
struct ibv_pd *sr_cm_pd(int idx)
{
	struct ibv_pd *pd;
	if (idx < 0 || idx >= SR_MAX_DEVICES)
		return NULL;
	pthread_mutex_lock(&sr_cm_mu);
	pd = sr_cm_pds[idx];
	pthread_mutex_unlock(&sr_cm_mu);
	return pd;
}

/* sr_cm_ready gives id the device that owns address sa (NULL: the first),
 * with the CM started on it, and sets id->verbs. */
static int sr_cm_ready(struct rdma_cm_id *id, struct sockaddr *sa)
{
	int idx = 0, err;
	struct ibv_context *c;
	if (id->verbs)
		return 0;
	err = srgo_cm_device(sa, &idx);
	if (err)
		return err;
	c = sr_cm_ctx(idx);
	if (!c)
		return errno ? errno : ENODEV;
	err = srgo_cm_attach(((struct sr_context *)((char *)c - offsetof(struct sr_context, vctx.context)))->h);
	if (err)
		return err;
	id->verbs = c;
	id->pd = sr_cm_pd(idx);
	id->port_num = 1;
	return 0;
}

/* sr_cm_preopen opens the device whose address is known before the
 * program names one (SOFTROCE_ADDR, or a link's device) and starts its
 * CM, when the program creates its first event channel: the kernel's
 * device and CM are always there, and a program's first rdma_resolve_addr
 * or rdma_bind_addr does not then wait for a socket, the device and its
 * CM agent (about 2 ms). Once per process; errors are left for the
 * program's own calls to meet. */
static void sr_cm_preopen(void)
{
	static int once;
	struct ibv_context *c;
	int idx;
	if (__atomic_exchange_n(&once, 1, __ATOMIC_SEQ_CST) || srgo_cm_preopen_device(&idx))
		return;
	c = sr_cm_ctx(idx);
	if (c)
		(void)srgo_cm_attach(((struct sr_context *)((char *)c - offsetof(struct sr_context, vctx.context)))->h);
}

void sr_cm_free_event(struct sr_cm_event *e)
{
	free(e);
}

/* sr_ev_mu and sr_ev_cond guard the IDs' acknowledged counts; an ack is
 * C alone, with no call into the Go runtime. */
static pthread_mutex_t sr_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sr_ev_cond = PTHREAD_COND_INITIALIZER;

static void sr_cm_acked(struct sr_cm_id *s)
{
	pthread_mutex_lock(&sr_ev_mu);
	s->acked++;
	pthread_cond_broadcast(&sr_ev_cond);
	pthread_mutex_unlock(&sr_ev_mu);
}

/* sr_cm_wait_acked waits until the program has acknowledged the events it
 * was handed that count against s, as librdmacm's rdma_destroy_id and
 * rdma_migrate_id do (the count handed out so far: rdma_destroy_id marks
 * the ID dead first, so for it the count is final). */
static void sr_cm_wait_acked(struct sr_cm_id *s)
{
	sr_wait_acked(&sr_ev_mu, &sr_ev_cond, &s->acked, __atomic_load_n(&s->delivered, __ATOMIC_ACQUIRE));
}

SR_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct sr_cm_channel *c = calloc(1, sizeof(*c));
	int err = 0;
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	c->h = srgo_cm_create_channel(c->ch.fd, &err);
	if (!c->h) {
		close(c->ch.fd);
		free(c);
		errno = err;
		return NULL;
	}
	sr_cm_preopen();
	return &c->ch;
}

SR_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	struct sr_cm_channel *c = (struct sr_cm_channel *)ch;
	if (!ch)
		return;
	srgo_cm_destroy_channel(c->h);
	close(ch->fd);
	free(c);
}

SR_EXPORT int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **out, void *context,
			     enum rdma_port_space ps)
{
	struct sr_cm_id *id;
	int err = 0;
	int sync = 0;
	if (!out)
		return sr_err(EINVAL);
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB)
		return sr_err(EINVAL);
	if (!ch) {
		ch = rdma_create_event_channel();
		if (!ch)
			return -1;
		sync = 1;
	}
	id = calloc(1, sizeof(*id));
	if (!id)
		return sr_err(ENOMEM);
	id->sync = sync;
	id->h = srgo_cm_create_id(((struct sr_cm_channel *)ch)->h, id, ps, &err);
	if (!id->h) {
		free(id);
		if (sync)
			rdma_destroy_event_channel(ch);
		return sr_err(err);
	}
	id->id.channel = ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = ps == RDMA_PS_TCP ? IBV_QPT_RC : IBV_QPT_UD;
	*out = &id->id;
	return 0;
}

static void sr_cm_free_qp_res(struct sr_cm_id *s);

SR_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	int err;
	if (!id)
		return sr_err(EINVAL);
	err = srgo_cm_destroy_id(s->h);
	if (err)
		return sr_err(err);
	/* As librdmacm: the ID's own kept event, then wait until the program
	 * has acknowledged every event of the ID it was handed. */
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	sr_cm_wait_acked(s);
	srgo_cm_forget(s->h);
	sr_cm_free_qp_res(s);
	if (s->sync)
		rdma_destroy_event_channel(id->channel);
	free(s);
	return 0;
}

/* sr_sync waits, on a synchronous ID, for the event that ends a call, and
 * keeps it in id->event until the next call (librdmacm's rules: REJECTED
 * is ECONNREFUSED, another failed event its status as errno). */
static int sr_sync(struct rdma_cm_id *id, int ret)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	struct rdma_cm_event *ev;
	if (ret || !s->sync)
		return ret;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &ev))
		return -1;
	id->event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return sr_err(ECONNREFUSED);
		return sr_err(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

/* sr_cm_sync_event is sr_sync for the calls in other files (cmmcast.c). */
int sr_cm_sync_event(struct rdma_cm_id *id, int ret)
{
	return sr_sync(id, ret);
}

SR_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int err;
	if (!id || !addr)
		return sr_err(EINVAL);
	err = sr_cm_ready(id, addr);
	if (err)
		return sr_err(err);
	return sr_err(srgo_cm_bind(sr_id_h(id), addr));
}

SR_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	int err;
	if (!id || !dst)
		return sr_err(EINVAL);
	err = sr_cm_ready(id, src);
	if (err)
		return sr_err(err);
	return sr_sync(id, sr_err(srgo_cm_resolve_addr(sr_id_h(id), src, dst, timeout_ms)));
}

SR_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	if (!id)
		return sr_err(EINVAL);
	return sr_sync(id, sr_err(srgo_cm_resolve_route(sr_id_h(id), timeout_ms)));
}

SR_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	int err;
	if (!id)
		return sr_err(EINVAL);
	err = sr_cm_ready(id, NULL);
	if (err)
		return sr_err(err);
	return sr_err(srgo_cm_listen(sr_id_h(id), backlog));
}

/* The REQ carries this side's ECE; the REP answers with the peer's vendor
 * ID and this side's options (librdmacm's ucma_copy_ece_param_to_kern_*). */
SR_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	int r;
	if (!id)
		return sr_err(EINVAL);
	r = sr_err(srgo_cm_connect(sr_id_h(id), p, s->local_ece.vendor_id, s->local_ece.options));
	if (!r)
		s->conn_started = 1;
	return sr_sync(id, r);
}

SR_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	int r;
	if (!id)
		return sr_err(EINVAL);
	r = sr_err(srgo_cm_accept(sr_id_h(id), p, s->remote_ece.vendor_id, s->local_ece.options));
	/* A UD ID's accept (a SIDR_REP) has no event to wait for, even on a
	 * synchronous ID (librdmacm returns before ucma_complete). */
	if (id->qp_type == IBV_QPT_UD)
		return r;
	return sr_sync(id, r);
}

SR_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
	if (!id)
		return sr_err(EINVAL);
	return sr_err(srgo_cm_reject(sr_id_h(id), (void *)pdata, len, 28));
}

/* rdma_reject_ece: the REJ's reason is 35, VENDOR_OPTION_NOT_SUPPORTED. */
SR_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *pdata, uint8_t len)
{
	if (!id)
		return sr_err(EINVAL);
	return sr_err(srgo_cm_reject(sr_id_h(id), (void *)pdata, len, 35));
}

/* ECE is set and read before the ID has a QP, as librdmacm requires. */
SR_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return sr_err(EINVAL);
	((struct sr_cm_id *)id)->local_ece.vendor_id = ece->vendor_id;
	((struct sr_cm_id *)id)->local_ece.options = ece->options;
	return 0;
}

SR_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return sr_err(EINVAL);
	ece->vendor_id = ((struct sr_cm_id *)id)->remote_ece.vendor_id;
	ece->options = ((struct sr_cm_id *)id)->remote_ece.options;
	ece->comp_mask = 0;
	return 0;
}

/* rdma_disconnect: as the kernel's, an ID that has been through a
 * connection attempt (rdma_connect, or a request it came from) answers 0
 * whatever became of it (REJECTED, already disconnected), and its QP goes
 * to the error state (librdmacm's ucma_shutdown); one that never had one
 * is EINVAL. */
SR_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	int err;
	if (!id)
		return sr_err(EINVAL);
	err = srgo_cm_disconnect(sr_id_h(id));
	if (err == EINVAL && s->conn_started) {
		if (id->qp) {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
			ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
		}
		return 0;
	}
	return sr_err(err);
}

SR_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id)
		return sr_err(EINVAL);
	return sr_err(srgo_cm_establish(sr_id_h(id)));
}

SR_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : sr_err(EINVAL);
}

/* rdma_migrate_id moves the ID's future events to ch; with no channel it
 * makes the ID synchronous (a channel of its own), and a synchronous ID
 * moved to a channel becomes asynchronous, its own channel destroyed (as
 * librdmacm; rdma_create_ep's IDs are synchronous until moved). It waits
 * until the events the program was handed for the ID are acknowledged. */
SR_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	int err, sync;
	if (!id || (s->sync && !ch))
		return sr_err(EINVAL);
	sync = !ch;
	if (sync && !(ch = rdma_create_event_channel()))
		return -1;
	err = srgo_cm_migrate(sr_id_h(id), ((struct sr_cm_channel *)ch)->h);
	if (err) {
		if (sync)
			rdma_destroy_event_channel(ch);
		return sr_err(err);
	}
	if (s->sync) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		rdma_destroy_event_channel(id->channel);
	}
	s->sync = sync;
	id->channel = ch;
	sr_cm_wait_acked(s);
	return 0;
}

SR_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	if (!id || !attr || !mask)
		return sr_err(EINVAL);
	return sr_err(srgo_cm_init_qp_attr(sr_id_h(id), attr, mask));
}

SR_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return sr_err(EINVAL);
	if (level != RDMA_OPTION_ID)
		return sr_err(ENOSYS);
	/* The kernel's ucma_set_option_id: a known option of the wrong size is
	 * EINVAL, an unknown one ENOSYS. */
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (optlen != sizeof(uint8_t))
			return sr_err(EINVAL);
		return sr_err(srgo_cm_set_tos(sr_id_h(id), *(uint8_t *)optval));
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (optlen != sizeof(uint8_t))
			return sr_err(EINVAL);
		return sr_err(srgo_cm_set_ack_timeout(sr_id_h(id), *(uint8_t *)optval));
	case RDMA_OPTION_ID_REUSEADDR:
	case RDMA_OPTION_ID_AFONLY:
		return optlen == sizeof(int) ? 0 : sr_err(EINVAL);
	}
	return sr_err(ENOSYS);
}

/* rdma_get_cm_event takes the oldest event; with none, it waits for the
 * channel's fd, which is readable exactly while events wait (EAGAIN if the
 * program made it non-blocking, as the kernel's ucma file), and on the
 * device's link, whose datagrams it then handles itself (srgo_cm_wait). */
SR_EXPORT int rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event)
{
	int r;
	if (!ch || !event)
		return sr_err(EINVAL);
	/* Nothing in a forked child handles the device: fail, do not block. */
	if (sr_forked_child("rdma_get_cm_event"))
		return -1;
	for (;;) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		int fl;
		r = srgo_cm_take_event(((struct sr_cm_channel *)ch)->h, event);
		if (r == 0)
			return 0;
		if (r == EINVAL) {
			/* Another thread destroyed the channel while this one read it:
			 * with the kernel's ucma file this read would never return
			 * (rping's event thread relies on it), so neither does this. */
			for (;;)
				pause();
		}
		if (r != 1)
			return sr_err(r);
		/* Wait on the device's link and the fd together, handling what
		 * arrives on this thread and taking the first event itself
		 * (srgo_cm_wait; EAGAIN on a non-blocking fd); a signal, as in
		 * poll below, only makes it look again. */
		*event = NULL;
		r = srgo_cm_wait(((struct sr_cm_channel *)ch)->h, event);
		if (r == 0 && *event)
			return 0;
		if (r == EAGAIN)
			sr_idle_go(); /* a non-blocking channel, polled in a loop */
		if (r > 0)
			return sr_err(r);
		if (r != -1)
			continue;
		fl = fcntl(ch->fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			sr_idle_go();
			return sr_err(EAGAIN);
		}
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

SR_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return sr_err(EINVAL);
	/* It touches no ID but the one the event counts against, which
	 * rdma_destroy_id keeps until then (the event's own ID may be gone:
	 * a rejected request's, destroyed before the ack). */
	sr_cm_acked(((struct sr_cm_event *)event)->counted);
	sr_cm_free_event((struct sr_cm_event *)event);
	return 0;
}

/* ---- the ID's QP (rdma_verbs.h) ---- */

static void sr_cm_free_qp_res(struct sr_cm_id *s)
{
	struct rdma_cm_id *id = &s->id;
	if (s->own_cqs) {
		if (id->send_cq)
			ibv_destroy_cq(id->send_cq);
		if (id->recv_cq && id->recv_cq != id->send_cq)
			ibv_destroy_cq(id->recv_cq);
		if (id->send_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		if (id->recv_cq_channel && id->recv_cq_channel != id->send_cq_channel)
			ibv_destroy_comp_channel(id->recv_cq_channel);
		id->send_cq = id->recv_cq = NULL;
		id->send_cq_channel = id->recv_cq_channel = NULL;
		s->own_cqs = 0;
	}
}

/* sr_cm_create_qp is rdma_create_qp with ibv_create_qp_ex's create_flags. */
static int sr_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *uattr,
			   uint32_t create_flags, int how)
{
	struct sr_cm_id *s = (struct sr_cm_id *)id;
	struct sr_qp *q;
	int err = 0;
	uint32_t qpn = 0;
	struct ibv_qp_init_attr a, *attr = &a;

	if (!id || !uattr || !id->verbs)
		return sr_err(EINVAL);
	/* The QP type is the ID's (more lenient than librdmacm, which takes
	 * the program's); what librdmacm writes back (it copies its whole
	 * working copy over the program's struct) is set below. */
	a = *uattr;
	if (id->qp)
		return sr_err(EINVAL);
	if (!pd) {
		pd = id->pd;
		if (!pd)
			return sr_err(ENODEV);
	} else if (pd->context != id->verbs) {
		return sr_err(EINVAL);
	}
	if ((id->send_cq && attr->send_cq && id->send_cq != attr->send_cq) ||
	    (id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq))
		return sr_err(EINVAL);
	/* As librdmacm: a CQ, with its channel, for each queue given none and
	 * having none yet, of that queue's size. */
	if (!attr->send_cq && !id->send_cq) {
		s->own_cqs = 1;
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto fail_cq;
		id->send_cq = ibv_create_cq(id->verbs, attr->cap.max_send_wr ? attr->cap.max_send_wr : 1, id,
					    id->send_cq_channel, 0);
		if (!id->send_cq)
			goto fail_cq;
	}
	if (!attr->recv_cq && !id->recv_cq) {
		s->own_cqs = 1;
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto fail_cq;
		id->recv_cq = ibv_create_cq(id->verbs, attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1, id,
					    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto fail_cq;
	}
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	q = calloc(1, sizeof(*q));
	if (!q)
		return sr_err(ENOMEM);
	attr->qp_type = id->qp_type;
	q->h = srgo_cm_create_qp(s->h, ((struct sr_pd *)pd)->h, attr, create_flags, ((struct sr_cq *)attr->send_cq)->h,
				 ((struct sr_cq *)attr->recv_cq)->h, attr->srq ? ((struct sr_srq *)attr->srq)->h : 0,
				 &q->qpx.qp_base, &qpn, &err);
	if (!q->h) {
		free(q);
		return sr_err(err);
	}
	if (sr_qp_ex_setup(q, &attr->cap, how)) {
		uint32_t async = 0;
		srgo_cm_destroy_qp(s->h, q->h, &async);
		free(q);
		errno = ENOMEM;
		goto fail_cq;
	}
	q->qpx.qp_base.context = id->verbs;
	q->qpx.qp_base.qp_context = attr->qp_context;
	q->qpx.qp_base.pd = pd;
	q->qpx.qp_base.send_cq = attr->send_cq;
	q->qpx.qp_base.recv_cq = attr->recv_cq;
	q->qpx.qp_base.srq = attr->srq;
	q->qpx.qp_base.handle = (uint32_t)q->h;
	q->qpx.qp_base.qp_num = qpn;
	q->qpx.qp_base.state = IBV_QPS_INIT;
	q->qpx.qp_base.qp_type = attr->qp_type;
	pthread_mutex_init(&q->qpx.qp_base.mutex, NULL);
	pthread_cond_init(&q->qpx.qp_base.cond, NULL);
	pthread_mutex_init(&q->batch_mu, NULL);
	id->qp = &q->qpx.qp_base;
	id->pd = pd;
	/* As librdmacm: the program's struct gets the CQs and SRQ the QP uses
	 * and its caps. A program that passes the same struct for every ID
	 * (cmtime) so puts later QPs on the first ID's CQs, there as here. */
	uattr->send_cq = a.send_cq;
	uattr->recv_cq = a.recv_cq;
	uattr->srq = a.srq;
	uattr->cap = a.cap;
	/* As librdmacm: the QP's ECE (ibv_query_ece: EOPNOTSUPP here, as on
	 * rxe, so none) replaces what rdma_set_local_ece set. */
	s->local_ece.vendor_id = 0;
	s->local_ece.options = 0;
	return 0;
fail_cq:
	err = errno;
	sr_cm_free_qp_res(s);
	return sr_err(err ? err : ENOMEM);
}

SR_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	/* librdmacm's attributes then hold only the PD, with which
	 * ibv_create_qp_ex takes the plain ibv_create_qp: not an ibv_qp_ex. */
	return sr_cm_create_qp(id, pd, attr, 0, 0);
}

/* rdma_create_qp_ex: a PD and create_flags (only multicast loopback
 * blocking, as mckey -l asks: package verbs' QPCreateBlockSelfMcastLB). */
SR_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *ax)
{
	struct ibv_qp_init_attr a;
	uint32_t flags = 0;
	int r, how = 0;
	if (!id || !ax)
		return sr_err(EINVAL);
	/* ibv_create_qp_ex takes the provider's create_qp_ex (an ibv_qp_ex)
	 * only for attributes beyond the PD. */
	if (ax->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD)
		how = SR_QP_EX;
	/* What the library's ibv_create_qp_ex takes, as librdmacm hands the
	 * attributes to the provider's. */
	if (ax->comp_mask &
	    ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return sr_err(EOPNOTSUPP);
	if (ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) {
		flags = ax->create_flags;
		if (flags & ~(uint32_t)IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)
			return sr_err(EOPNOTSUPP);
	}
	if (ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		if (ax->send_ops_flags & ~sr_send_ops(id->qp_type))
			return sr_err(EOPNOTSUPP);
		how |= SR_QP_SEND_OPS;
	}
	sr_qp_attr_from_ex(&a, ax);
	r = sr_cm_create_qp(id, (ax->comp_mask & IBV_QP_INIT_ATTR_PD) ? ax->pd : NULL, &a, flags, how);
	if (!r) {
		/* As librdmacm's rdma_create_qp_ex, which works on the program's
		 * struct: the PD, CQs and SRQ the QP uses, and its caps. */
		ax->cap = a.cap;
		ax->pd = id->pd;
		ax->comp_mask |= IBV_QP_INIT_ATTR_PD;
		ax->send_cq = a.send_cq;
		ax->recv_cq = a.recv_cq;
		ax->srq = a.srq;
	}
	return r;
}

SR_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct sr_qp *q;
	uint32_t async = 0;
	if (!id || !id->qp)
		return;
	q = (struct sr_qp *)id->qp;
	if (srgo_cm_destroy_qp(sr_id_h(id), q->h, &async) == 0) {
		sr_wait_acked(&id->qp->mutex, &id->qp->cond, &id->qp->events_completed, async);
		sr_wr_batch_free(q->batch);
		free(q);
	}
	id->qp = NULL;
	sr_cm_free_qp_res((struct sr_cm_id *)id);
}

/* ---- the ID's SRQ (rdma_verbs.h) ---- */

/* rdma_create_srq_ex gives the ID a shared receive queue, on the ID's PD
 * when given none: rdma_create_qp then gives it to the ID's QP, and
 * rdma_post_recv(v) posts to it. An XRC SRQ needs XRC, which rxe lacks
 * (EOPNOTSUPP). Unlike librdmacm, a second SRQ on one ID is refused
 * (EINVAL) rather than leaking the first. */
SR_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;
	if (!id || !attr || !id->verbs || id->srq)
		return sr_err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return sr_err(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return sr_err(EOPNOTSUPP);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (!attr->pd)
		return sr_err(ENODEV);
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

/* rdma_create_srq is rdma_create_srq_ex for a basic SRQ (an XRC one on an
 * XRC_RECV ID, as librdmacm, which is refused); attr gets the SRQ's sizes. */
SR_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax;
	int r;
	if (!id || !attr)
		return sr_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, attr, sizeof(*attr));
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ax.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ax.pd = pd;
	r = rdma_create_srq_ex(id, &ax);
	memcpy(attr, &ax, sizeof(*attr));
	return r;
}

SR_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* ---- addresses ---- */

static uint16_t sr_port_of(struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		return ((struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

SR_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? sr_port_of(&id->route.addr.src_addr) : 0;
}

SR_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? sr_port_of(&id->route.addr.dst_addr) : 0;
}

SR_EXPORT struct ibv_context **rdma_get_devices(int *num)
{
	int n = 0, i, k = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context **out = calloc(n + 1, sizeof(*out));
	if (!l || !out) {
		free(out);
		ibv_free_device_list(l);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		struct ibv_context *c = sr_cm_ctx(i);
		if (c)
			out[k++] = c;
	}
	ibv_free_device_list(l);
	if (num)
		*num = k;
	return out;
}

SR_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* rdma_getaddrinfo: the system resolver's answer in librdmacm's shape. */
/* sr_copy_addr copies an address into a new allocation. */
static int sr_copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return sr_err(ENOMEM);
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/* rdma_getaddrinfo is librdmacm's: getaddrinfo with the hints' QP type and
 * port space as socket type and protocol (and each derived from the other
 * when left out), RAI_PASSIVE as AI_PASSIVE; a failed lookup returns
 * getaddrinfo's EAI_ code, as programs expect (cmtime prints
 * gai_strerror of it). With neither node nor service, the hints alone. */
SR_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo none;
	struct addrinfo h = { 0 }, *ai = NULL;
	struct rdma_addrinfo *r;
	int err = 0;

	if (!res || (!node && !service && !hints))
		return sr_err(EINVAL);
	if (!hints)
		hints = &none;
	r = calloc(1, sizeof(*r));
	if (!r)
		return sr_err(ENOMEM);
	if (node || service) {
		if (hints->ai_flags & RAI_PASSIVE)
			h.ai_flags = AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_family != AF_IB)
			h.ai_family = hints->ai_family;
		switch (hints->ai_qp_type) {
		case IBV_QPT_RC:
		case IBV_QPT_UC:
		case IBV_QPT_XRC_SEND:
		case IBV_QPT_XRC_RECV:
			h.ai_socktype = SOCK_STREAM;
			break;
		case IBV_QPT_UD:
			h.ai_socktype = SOCK_DGRAM;
			break;
		}
		switch (hints->ai_port_space) {
		case RDMA_PS_TCP:
			h.ai_protocol = IPPROTO_TCP;
			break;
		case RDMA_PS_IPOIB:
		case RDMA_PS_UDP:
			h.ai_protocol = IPPROTO_UDP;
			break;
		case RDMA_PS_IB:
			h.ai_protocol = h.ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : h.ai_socktype ? IPPROTO_TCP : 0;
			break;
		}
		err = getaddrinfo(node, service, &h, &ai);
		if (err) {
			free(r);
			return err;
		}
		r->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type :
				ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
		r->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
				   ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
		r->ai_family = ai->ai_family;
		if (ai->ai_flags & AI_PASSIVE) {
			r->ai_flags = RAI_PASSIVE;
			err = sr_copy_addr(&r->ai_src_addr, &r->ai_src_len, ai->ai_addr, ai->ai_addrlen);
		} else {
			err = sr_copy_addr(&r->ai_dst_addr, &r->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
		}
		freeaddrinfo(ai);
	} else {
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			err = sr_copy_addr(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!err && !r->ai_src_len && hints->ai_src_len)
		err = sr_copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (err) {
		rdma_freeaddrinfo(r);
		return err;
	}
	*res = r;
	return 0;
}

SR_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* ---- endpoints (rdma_verbs.h's synchronous model) ---- */

SR_EXPORT int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *id;
	struct sr_cm_id *s;
	if (!out || !res)
		return sr_err(EINVAL);
	if (rdma_create_id(NULL, &id, NULL, res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP))
		return -1;
	s = (struct sr_cm_id *)id;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(id, res->ai_src_addr))
			goto fail;
		if (qp_init_attr) {
			s->ep_attr = *qp_init_attr;
			s->ep_pd = pd;
			s->has_ep_attr = 1;
		}
		if (pd)
			id->pd = pd; /* librdmacm's ucma_passive_ep */
	} else {
		if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000) || rdma_resolve_route(id, 2000))
			goto fail;
		if (qp_init_attr && rdma_create_qp(id, pd, qp_init_attr))
			goto fail;
	}
	*out = id;
	return 0;
fail:
	{
		int e = errno;
		rdma_destroy_id(id);
		return sr_err(e);
	}
}

SR_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

SR_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	struct sr_cm_id *l = (struct sr_cm_id *)listen;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	if (!listen || !out)
		return sr_err(EINVAL);
	if (!l->sync)
		return sr_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev); /* e.g. events of the listener's own */
	}
	id = ev->id;
	/* The new ID is synchronous too: a channel of its own. */
	if (rdma_migrate_id(id, NULL)) {
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (l->has_ep_attr) {
		struct ibv_qp_init_attr a = l->ep_attr;
		if (rdma_create_qp(id, l->ep_pd, &a)) {
			int e = errno;
			rdma_reject(id, NULL, 0);
			rdma_ack_cm_event(ev);
			rdma_destroy_id(id);
			return sr_err(e);
		}
	}
	ev->id->event = ev;
	*out = id;
	return 0;
}
