/* errors.c: the error paths a verbs program can hit, through the library
 * as a C program sees it. Each case prints "ok NAME" or "FAIL NAME: why";
 * the exit status is the number of failures. Built by capitest against
 * the installed headers. Two RC QPs of one device talk to each other. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "qpconn.h"

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static struct ibv_context *ctx;
static union ibv_gid gid;

struct conn {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	char *buf;
	size_t len;
};

static int to_init(struct ibv_qp *qp)
{
	return qp_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static int to_rts(struct ibv_qp *qp, uint32_t dest)
{
	return qp_rtr_rts(qp, dest, &gid);
}

static struct ibv_qp *new_qp(struct ibv_pd *pd, struct ibv_cq *cq, int wr)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = 1, .max_recv_sge = 1 } };
	return ibv_create_qp(pd, &ia);
}

/* connect makes two connected RC QPs over one MR of len bytes. */
static int connect_pair(struct conn *c, size_t len, int wr, struct ibv_comp_channel *ch)
{
	memset(c, 0, sizeof(*c));
	c->len = len;
	c->buf = calloc(1, len);
	c->pd = ibv_alloc_pd(ctx);
	c->cq = ibv_create_cq(ctx, 256, NULL, ch, 0);
	if (!c->buf || !c->pd || !c->cq)
		return -1;
	c->mr = ibv_reg_mr(c->pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	c->a = new_qp(c->pd, c->cq, wr);
	c->b = new_qp(c->pd, c->cq, wr);
	if (!c->mr || !c->a || !c->b)
		return -1;
	if (to_init(c->a) || to_init(c->b) || to_rts(c->a, c->b->qp_num) || to_rts(c->b, c->a->qp_num))
		return -1;
	return 0;
}

static void close_pair(struct conn *c)
{
	if (c->a) ibv_destroy_qp(c->a);
	if (c->b) ibv_destroy_qp(c->b);
	if (c->mr) ibv_dereg_mr(c->mr);
	if (c->cq) ibv_destroy_cq(c->cq);
	if (c->pd) ibv_dealloc_pd(c->pd);
	free(c->buf);
}

static int post_write(struct conn *c, struct ibv_qp *qp, uint64_t id, size_t off, uint32_t n, uint32_t lkey, int signaled)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf + off, .length = n, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = signaled ? IBV_SEND_SIGNALED : 0 }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)c->buf + c->len / 2;
	wr.wr.rdma.rkey = c->mr->rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static void test_bad_transition(void)
{
	const char *name = "bad_transition";
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = new_qp(pd, cq, 4);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS };
	int err = ibv_modify_qp(qp, &at, IBV_QP_STATE);
	if (err != EINVAL)
		FAIL(name, "RESET->RTS returned %d, want EINVAL", err);
	else
		OK(name);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

static void test_sq_full(void)
{
	const char *name = "sq_full";
	struct conn c;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_sge sge[16];
	struct ibv_send_wr wr[16], *bad = NULL;
	int i, cap, err;

	if (connect_pair(&c, 1 << 16, 4, NULL)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	ibv_query_qp(c.a, &qa, IBV_QP_CAP, &qi);
	cap = qi.cap.max_send_wr;
	if (cap >= 16) {
		FAIL(name, "granted %d send WRs for 4", cap);
		close_pair(&c);
		return;
	}
	for (i = 0; i < 16; i++) {
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)c.buf, .length = 8, .lkey = c.mr->lkey };
		wr[i] = (struct ibv_send_wr){ .wr_id = i, .sg_list = &sge[i], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					      .send_flags = IBV_SEND_SIGNALED, .next = i < 15 ? &wr[i + 1] : NULL };
		wr[i].wr.rdma.remote_addr = (uintptr_t)c.buf + 4096;
		wr[i].wr.rdma.rkey = c.mr->rkey;
	}
	err = ibv_post_send(c.a, wr, &bad);
	if (err != ENOMEM || bad != &wr[cap])
		FAIL(name, "posting 16 to a queue of %d: err %d bad_wr index %ld, want ENOMEM and %d", cap, err,
		     bad ? (long)(bad - wr) : -1L, cap);
	else
		OK(name);
	for (i = 0; i < cap; i++) {
		struct ibv_wc wc;
		if (!wait_wc(c.cq, &wc) || wc.status != IBV_WC_SUCCESS) {
			FAIL(name, "completion %d of the accepted WRs missing or failed", i);
			break;
		}
	}
	close_pair(&c);
}

static void test_sge_outside_mr(void)
{
	const char *name = "sge_outside_mr";
	struct conn c;
	struct ibv_wc wc;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int err;

	if (connect_pair(&c, 1 << 16, 16, NULL)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	err = post_write(&c, c.a, 42, c.len - 8, 16, c.mr->lkey, 1); /* 8 bytes past the MR */
	if (err) {
		FAIL(name, "post returned %d, want 0 and an error completion (as rxe)", err);
	} else if (!wait_wc(c.cq, &wc)) {
		FAIL(name, "no completion");
	} else if (wc.status != IBV_WC_LOC_PROT_ERR || wc.wr_id != 42) {
		FAIL(name, "completion %s (%d) wr_id %llu, want local protection error", ibv_wc_status_str(wc.status),
		     wc.status, (unsigned long long)wc.wr_id);
	} else if (ibv_query_qp(c.a, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_ERR) {
		FAIL(name, "QP state %d, want ERR", qa.qp_state);
	} else {
		OK(name);
	}
	close_pair(&c);
}

static void test_destroy_busy(void)
{
	const char *name = "destroy_busy";
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct conn c;
	int e1, e2, e3;

	if (!ch || connect_pair(&c, 4096, 4, ch)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	e1 = ibv_dealloc_pd(c.pd);
	e2 = ibv_destroy_cq(c.cq);
	e3 = ibv_destroy_comp_channel(ch);
	if (e1 != EBUSY || e2 != EBUSY || e3 != EBUSY)
		FAIL(name, "dealloc_pd %d, destroy_cq %d, destroy_comp_channel %d: want EBUSY each", e1, e2, e3);
	else
		OK(name);
	close_pair(&c);
	if (ibv_destroy_comp_channel(ch))
		FAIL(name, "destroy_comp_channel after its CQ: %s", strerror(errno));
}

static void test_events_nonblock(void)
{
	const char *name = "events_nonblock";
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct conn c;
	struct ibv_cq *got;
	void *gctx;
	struct ibv_wc wc;
	struct pollfd pfd;

	if (!ch || connect_pair(&c, 8192, 16, ch)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	if (ibv_get_cq_event(ch, &got, &gctx) != -1 || errno != EAGAIN) {
		FAIL(name, "empty channel: errno %d, want EAGAIN", errno);
		goto out;
	}
	ibv_req_notify_cq(c.cq, 0);
	post_write(&c, c.a, 1, 0, 64, c.mr->lkey, 1);
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	if (poll(&pfd, 1, 5000) != 1) {
		FAIL(name, "the channel fd did not become readable");
		goto out;
	}
	if (ibv_get_cq_event(ch, &got, &gctx) || got != c.cq) {
		FAIL(name, "get_cq_event: %s", strerror(errno));
		goto out;
	}
	errno = 0;
	if (ibv_get_cq_event(ch, &got, &gctx) != -1 || errno != EAGAIN) {
		FAIL(name, "a second event for one arming (errno %d)", errno);
		goto out;
	}
	ibv_ack_cq_events(c.cq, 1);
	if (!wait_wc(c.cq, &wc) || wc.status != IBV_WC_SUCCESS)
		FAIL(name, "completion after the event");
	else
		OK(name);
out:
	close_pair(&c);
	ibv_destroy_comp_channel(ch);
}

static void test_epoll_edge(void)
{
	const char *name = "epoll_edge";
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct conn c;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET }, out[4];
	struct ibv_cq *got;
	void *gctx;
	struct ibv_wc wc;
	int ep, i, n, events = 0, unacked = 0;

	if (!ch || connect_pair(&c, 8192, 16, ch)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	ep = epoll_create1(0);
	epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev);
	for (i = 0; i < 20; i++) {
		ibv_req_notify_cq(c.cq, 0);
		post_write(&c, c.a, i, 0, 64, c.mr->lkey, 1);
		n = epoll_wait(ep, out, 4, 5000);
		if (n != 1) {
			FAIL(name, "round %d: epoll_wait %d, want 1", i, n);
			break;
		}
		while (ibv_get_cq_event(ch, &got, &gctx) == 0) {
			events++;
			unacked++;
		}
		if (errno != EAGAIN) {
			FAIL(name, "round %d: get_cq_event: %s", i, strerror(errno));
			break;
		}
		/* Drain the completion (several may be there). */
		while (ibv_poll_cq(c.cq, 1, &wc) > 0)
			;
		if (epoll_wait(ep, out, 4, 0) != 0) {
			FAIL(name, "round %d: a second edge for one event", i);
			break;
		}
	}
	if (i == 20 && events != 20)
		FAIL(name, "%d events for 20 armings", events);
	else if (i == 20)
		OK(name);
	ibv_ack_cq_events(c.cq, unacked);
	close(ep);
	close_pair(&c);
	ibv_destroy_comp_channel(ch);
}

struct destroyer {
	struct ibv_cq *cq;
	volatile int done;
	int err;
};

static void *destroy_thread(void *p)
{
	struct destroyer *d = p;
	d->err = ibv_destroy_cq(d->cq);
	d->done = 1;
	return NULL;
}

static void test_destroy_waits_for_acks(void)
{
	const char *name = "destroy_waits_for_acks";
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct conn c;
	struct ibv_cq *got;
	void *gctx;
	struct ibv_wc wc;
	struct destroyer d = { 0 };
	pthread_t th;

	if (!ch || connect_pair(&c, 8192, 16, ch)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	ibv_req_notify_cq(c.cq, 0);
	post_write(&c, c.a, 1, 0, 64, c.mr->lkey, 1);
	if (ibv_get_cq_event(ch, &got, &gctx)) {
		FAIL(name, "get_cq_event: %s", strerror(errno));
		return;
	}
	wait_wc(c.cq, &wc);
	ibv_destroy_qp(c.a);
	ibv_destroy_qp(c.b);
	c.a = c.b = NULL;
	d.cq = c.cq;
	pthread_create(&th, NULL, destroy_thread, &d);
	usleep(200000);
	if (d.done) {
		FAIL(name, "destroy_cq returned (%d) with an event not acknowledged", d.err);
		pthread_join(th, NULL);
	} else {
		ibv_ack_cq_events(c.cq, 1);
		pthread_join(th, NULL);
		if (d.err)
			FAIL(name, "destroy_cq after the ack: %d", d.err);
		else
			OK(name);
	}
	c.cq = NULL;
	close_pair(&c);
	ibv_destroy_comp_channel(ch);
}

static void test_async_nonblock(void)
{
	const char *name = "async_nonblock";
	struct ibv_async_event ev;
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	if (ibv_get_async_event(ctx, &ev) != -1 || errno != EAGAIN)
		FAIL(name, "no event pending: errno %d, want EAGAIN (event %d)", errno, ev.event_type);
	else
		OK(name);
}

struct worker {
	int id, err;
	char why[128];
};

static void *work(void *p)
{
	struct worker *w = p;
	struct conn c;
	struct ibv_wc wc[16];
	int i, done = 0, posted = 0;

	if (connect_pair(&c, 1 << 16, 64, NULL)) {
		w->err = 1;
		snprintf(w->why, sizeof(w->why), "set-up: %s", strerror(errno));
		return NULL;
	}
	while (done < 2000) {
		while (posted - done < 32 && posted < 2000) {
			if (post_write(&c, (posted & 1) ? c.b : c.a, posted, (posted % 64) * 64, 64, c.mr->lkey, 1)) {
				w->err = 1;
				snprintf(w->why, sizeof(w->why), "post %d failed", posted);
				goto out;
			}
			posted++;
		}
		int n = ibv_poll_cq(c.cq, 16, wc);
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				w->err = 1;
				snprintf(w->why, sizeof(w->why), "completion %s", ibv_wc_status_str(wc[i].status));
				goto out;
			}
		}
		done += n;
	}
out:
	close_pair(&c);
	return NULL;
}

static void test_threads(void)
{
	const char *name = "threads8";
	pthread_t th[8];
	struct worker w[8];
	int i, bad = 0;
	for (i = 0; i < 8; i++) {
		w[i] = (struct worker){ .id = i };
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		if (w[i].err) {
			FAIL(name, "thread %d: %s", i, w[i].why);
			bad = 1;
		}
	}
	if (!bad)
		OK(name);
}

static void test_unmapped(void)
{
	const char *name = "unmapped";
	struct conn c;
	struct ibv_wc wc;
	size_t len = 1 << 16;
	char *src, *dst;
	struct ibv_mr *smr, *dmr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;

	if (connect_pair(&c, 1 << 16, 16, NULL)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	smr = ibv_reg_mr(c.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	dmr = ibv_reg_mr(c.pd, dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!smr || !dmr) {
		FAIL(name, "reg_mr: %s", strerror(errno));
		goto out;
	}
	/* The peer writes into memory its owner unmapped: a remote access error. */
	munmap(dst, len);
	sge = (struct ibv_sge){ .addr = (uintptr_t)c.buf, .length = 64, .lkey = c.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	if (ibv_post_send(c.a, &wr, &bad) || !wait_wc(c.cq, &wc) || wc.status != IBV_WC_REM_ACCESS_ERR) {
		FAIL(name, "WRITE into unmapped memory: status %s, want remote access error", ibv_wc_status_str(wc.status));
		goto out;
	}
	/* A send from memory unmapped while registered: a local protection
	 * error (on a fresh pair: the responder of the first is in error). */
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	smr = dmr = NULL;
	close_pair(&c);
	if (connect_pair(&c, 1 << 16, 16, NULL)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	smr = ibv_reg_mr(c.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
	munmap(src, len);
	sge = (struct ibv_sge){ .addr = (uintptr_t)src, .length = 64, .lkey = smr ? smr->lkey : 0 };
	wr.wr.rdma.remote_addr = (uintptr_t)c.buf + 4096;
	wr.wr.rdma.rkey = c.mr->rkey;
	wr.wr_id = 2;
	if (!smr || ibv_post_send(c.b, &wr, &bad) || !wait_wc(c.cq, &wc) || wc.status != IBV_WC_LOC_PROT_ERR) {
		FAIL(name, "WRITE from unmapped memory: status %s, want local protection error", ibv_wc_status_str(wc.status));
		goto out;
	}
	OK(name);
out:
	if (smr) ibv_dereg_mr(smr);
	if (dmr) ibv_dereg_mr(dmr);
	close_pair(&c);
}

static void test_bad_handles(void)
{
	const char *name = "misuse";
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr;
	char buf[64];

	/* Access flags rxe refuses: remote write without local write. */
	errno = 0;
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE);
	if (mr || errno != EINVAL) {
		FAIL(name, "reg_mr with REMOTE_WRITE alone: %p errno %d, want NULL and EINVAL", (void *)mr, errno);
	} else if (ibv_create_cq(ctx, 0, NULL, NULL, 0) || errno != EINVAL) {
		FAIL(name, "create_cq with 0 entries: want NULL and EINVAL (errno %d)", errno);
	} else if (ibv_create_cq(ctx, 1, NULL, NULL, 5) || errno != EINVAL) {
		FAIL(name, "create_cq on comp vector 5 of %d: want EINVAL", ctx->num_comp_vectors);
	} else {
		OK(name);
	}
	ibv_dealloc_pd(pd);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0]) {
		printf("FAIL setup: no device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx || ibv_query_gid(ctx, 1, 1, &gid)) {
		printf("FAIL setup: open: %s\n", strerror(errno));
		return 1;
	}
	test_bad_transition();
	test_sq_full();
	test_sge_outside_mr();
	test_destroy_busy();
	test_events_nonblock();
	test_epoll_edge();
	test_destroy_waits_for_acks();
	test_async_nonblock();
	test_threads();
	test_bad_handles();
	test_unmapped();
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failures;
}
