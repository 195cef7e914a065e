/* extra.c: parts of the API the stock tools do not reach: memory windows of
 * both types, the extended CQ's polling ops, the SRQ limit event, and
 * ibv_wr_* with a send list; and the descriptor table the library grew at
 * load (FDSize in /proc/self/status, before this program opens anything). Two RC QPs of one device talk to each other.
 * Prints "ok NAME" or "FAIL NAME: why"; exits with the number of failures.
 * Argument: the device's address (unused). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <infiniband/verbs.h>
#include "qpconn.h"

static int failures;
static struct ibv_context *ctx;
static union ibv_gid gid;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static int to_rts(struct ibv_qp *qp, uint32_t dest)
{
	if (qp_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND))
		return -1;
	return qp_rtr_rts(qp, dest, &gid);
}

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static char *buf;
static struct ibv_mr *mr;
#define LEN (1 << 16)

static struct ibv_qp *new_qp(struct ibv_srq *srq, struct ibv_cq *c)
{
	struct ibv_qp_init_attr ia = { .send_cq = c, .recv_cq = c, .srq = srq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 32, .max_recv_wr = srq ? 0 : 32, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	return ibv_create_qp(pd, &ia);
}

static int write_with(struct ibv_qp *qp, struct ibv_cq *c, uint32_t rkey, uint64_t raddr, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	wr.wr.rdma.rkey = rkey;
	wr.wr.rdma.remote_addr = raddr;
	if (ibv_post_send(qp, &wr, &bad) || !wait_wc(c, &wc))
		return -1;
	return wc.status;
}

static void test_mw(void)
{
	const char *name = "mw";
	struct ibv_qp *a = new_qp(NULL, cq), *b = new_qp(NULL, cq);
	struct ibv_mw *w1, *w2;
	struct ibv_mw_bind bind1;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	uint32_t rkey2;
	int st;

	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	/* Type 1, bound with ibv_bind_mw on b. */
	w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	if (!w1) {
		FAIL(name, "alloc type 1: %s", strerror(errno));
		return;
	}
	memset(&bind1, 0, sizeof(bind1));
	bind1.wr_id = 11;
	bind1.send_flags = IBV_SEND_SIGNALED;
	bind1.bind_info.mr = mr;
	bind1.bind_info.addr = (uintptr_t)buf + 4096;
	bind1.bind_info.length = 4096;
	bind1.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_bind_mw(b, w1, &bind1) || !wait_wc(cq, &wc) || wc.status != IBV_WC_SUCCESS) {
		FAIL(name, "bind type 1: %s / %s", strerror(errno), ibv_wc_status_str(wc.status));
		return;
	}
	if ((st = write_with(a, cq, w1->rkey, (uintptr_t)buf + 4096, 12)) != IBV_WC_SUCCESS) {
		FAIL(name, "WRITE through the type 1 window: %d", st);
		return;
	}
	/* Type 2, bound with a BIND_MW work request on b. */
	w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!w2) {
		FAIL(name, "alloc type 2: %s", strerror(errno));
		return;
	}
	rkey2 = ibv_inc_rkey(w2->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 13;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = w2;
	wr.bind_mw.rkey = rkey2;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)buf + 8192;
	wr.bind_mw.bind_info.length = 4096;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_post_send(b, &wr, &bad) || !wait_wc(cq, &wc) || wc.status != IBV_WC_SUCCESS) {
		FAIL(name, "bind type 2: %s / %s", strerror(errno), ibv_wc_status_str(wc.status));
		return;
	}
	if ((st = write_with(a, cq, rkey2, (uintptr_t)buf + 8192, 14)) != IBV_WC_SUCCESS) {
		FAIL(name, "WRITE through the type 2 window: %d", st);
		return;
	}
	/* Outside the window: a remote access error. */
	if ((st = write_with(a, cq, rkey2, (uintptr_t)buf + 8192 + 4096, 15)) != IBV_WC_REM_ACCESS_ERR) {
		FAIL(name, "WRITE past the window: status %d, want remote access error", st);
		return;
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (ibv_dealloc_mw(w1) || ibv_dealloc_mw(w2)) {
		FAIL(name, "dealloc: %s", strerror(errno));
		return;
	}
	OK(name);
}

static void test_cq_ex(void)
{
	const char *name = "cq_ex";
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM };
	struct ibv_cq_ex *cx = ibv_create_cq_ex(ctx, &ca);
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_qp *a, *b;
	int i, n = 0, ret;

	if (!cx) {
		FAIL(name, "create_cq_ex: %s", strerror(errno));
		return;
	}
	a = new_qp(NULL, ibv_cq_ex_to_cq(cx));
	b = new_qp(NULL, ibv_cq_ex_to_cq(cx));
	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	for (i = 0; i < 3; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 100 + i, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.rdma.rkey = mr->rkey;
		wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		ibv_post_send(a, &wr, &bad);
	}
	usleep(100000);
	for (int tries = 0; n < 3 && tries < 1000; tries++) {
		ret = ibv_start_poll(cx, &pa);
		if (ret == ENOENT) {
			usleep(1000);
			continue;
		}
		while (ret == 0) {
			if (cx->status != IBV_WC_SUCCESS || cx->wr_id != (uint64_t)(100 + n) ||
			    ibv_wc_read_opcode(cx) != IBV_WC_RDMA_WRITE || ibv_wc_read_qp_num(cx) != a->qp_num) {
				FAIL(name, "completion %d: status %d wr_id %llu opcode %d qp %u", n, cx->status,
				     (unsigned long long)cx->wr_id, ibv_wc_read_opcode(cx), ibv_wc_read_qp_num(cx));
				ibv_end_poll(cx);
				return;
			}
			n++;
			ret = ibv_next_poll(cx);
		}
		ibv_end_poll(cx);
	}
	if (n != 3)
		FAIL(name, "%d completions, want 3", n);
	else
		OK(name);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cx));
}

static void test_srq_limit(void)
{
	const char *name = "srq_limit";
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	struct ibv_async_event ev;
	struct ibv_qp *a, *b;
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_wc wc;
	int i;

	if (!srq) {
		FAIL(name, "create_srq: %s", strerror(errno));
		return;
	}
	a = new_qp(NULL, cq);
	b = new_qp(srq, cq);
	if (!a || !b || to_rts(a, b->qp_num) || to_rts(b, a->qp_num)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	for (i = 0; i < 8; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + 16384 + i * 256, .length = 256, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(srq, &wr, &bad)) {
			FAIL(name, "post_srq_recv: %s", strerror(errno));
			return;
		}
	}
	if (ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT)) {
		FAIL(name, "modify_srq: %s", strerror(errno));
		return;
	}
	for (i = 0; i < 5; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 32, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 200 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		ibv_post_send(a, &wr, &bad);
	}
	for (i = 0; i < 10; i++)
		if (!wait_wc(cq, &wc))
			break;
	if (poll(&p, 1, 5000) != 1 || ibv_get_async_event(ctx, &ev)) {
		FAIL(name, "no async event");
		return;
	}
	if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ev.element.srq != srq)
		FAIL(name, "event %s on %p, want SRQ limit reached on %p", ibv_event_type_str(ev.event_type),
		     (void *)ev.element.srq, (void *)srq);
	else
		OK(name);
	ibv_ack_async_event(&ev);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	if (ibv_destroy_srq(srq))
		FAIL(name, "destroy_srq: %s", strerror(errno));
}

/* test_fdtable: the library grew the descriptor table to 4,096 slots (or
 * the soft limit) at load, so that opening many completion channels never
 * waits for the kernel to grow it (an RCU grace period per doubling in a
 * process with threads). */
static void test_fdtable(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long size = -1, want = 4096;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < want)
		want = (long)rl.rlim_cur;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "FDSize: %ld", &size) == 1)
			break;
	if (f)
		fclose(f);
	if (want > 256 && size < want)
		printf("FAIL fdtable: FDSize %ld at start, want at least %ld\n", size, want), failures++;
	else
		printf("ok fdtable\n");
}

int main(void)
{
	struct ibv_device **list;

	test_fdtable();
	list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])) || ibv_query_gid(ctx, 1, 1, &gid)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	buf = calloc(1, LEN);
	mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_MW_BIND);
	if (!pd || !cq || !mr) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	test_mw();
	test_cq_ex();
	test_srq_limit();
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failures;
}
