/* onecpu.c: a program's thread that calls the library in a loop, finding
 * nothing to do, does not hold up the Go runtime's goroutines and timers
 * when the runtime has one processor (the process may use one CPU; the
 * test runs it under taskset): the loop gives the processor away now and
 * then (sr_idle_turn, sr_idle_go in capi/misc.c). Without that, the
 * runtime's monitor takes the processor back only every 10 ms.
 *  - rnr: an RC SEND to a QP with no receive posted is answered RNR NAK;
 *    the sender retries when its RNR timer (0.64 ms, a runtime timer)
 *    fires. The thread polls the sender's CQ throughout, and posts the
 *    receive after 3 ms; the completion follows within a timer's period or
 *    two (10 ms and more without the turns).
 *  - rconnect: a non-blocking rsocket connects to a listener of the same
 *    process (the dial runs on goroutines) while the thread polls it with
 *    rpoll(..., 0) and raccept, as stock rstream does (a step per 10 ms
 *    without the turns).
 * Each takes the median of ROUNDS rounds against a bound far above what the
 * turns give and below what their absence gives. Prints "ok NAME" or
 * "FAIL NAME: why"; exits with the number of failures. Argument: the
 * device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <rdma/rsocket.h>
#include <infiniband/verbs.h>
#include "qpconn.h"

#define ROUNDS 7
#define RNR_BOUND_MS 5.0
#define CONNECT_BOUND_MS 8.0

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name, ...) do { printf("ok %s: ", name); printf(__VA_ARGS__); printf("\n"); } while (0)

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof *v, cmp);
	return v[n / 2];
}

static void rnr(void)
{
	const char *name = "rnr";
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		FAIL(name, "no device");
		return;
	}
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *ca = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_cq *cb = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!ca || !cb) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	struct ibv_qp_init_attr ia = { .send_cq = ca, .recv_cq = ca, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	ia.send_cq = cb;
	ia.recv_cq = cb;
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	union ibv_gid gid;
	if (!a || !b || !mr || ibv_query_gid(ctx, 1, 1, &gid) || qp_init(a, 0) || qp_init(b, 0) ||
	    qp_rtr_rts(a, b->qp_num, &gid) || qp_rtr_rts(b, a->qp_num, &gid)) {
		FAIL(name, "QPs: %s", strerror(errno));
		return;
	}
	double took[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *rbad;
		struct ibv_wc wc;
		if (ibv_post_send(a, &wr, &bad)) {
			FAIL(name, "post_send: %s", strerror(errno));
			return;
		}
		double t0 = now_ms(), posted = 0;
		for (;;) {
			int k = ibv_poll_cq(ca, 1, &wc);
			if (k > 0)
				break;
			if (!posted && now_ms() - t0 > 3) {
				if (ibv_post_recv(b, &rw, &rbad)) {
					FAIL(name, "post_recv: %s", strerror(errno));
					return;
				}
				posted = now_ms();
			}
			if (now_ms() - t0 > 5000) {
				FAIL(name, "round %d: no completion in 5 s", r);
				return;
			}
		}
		if (wc.status != IBV_WC_SUCCESS) {
			FAIL(name, "round %d: %s", r, ibv_wc_status_str(wc.status));
			return;
		}
		took[r] = now_ms() - posted;
		while (ibv_poll_cq(cb, 1, &wc) == 0)
			;
	}
	double m = median(took, ROUNDS);
	if (m > RNR_BOUND_MS)
		FAIL(name, "the retried SEND completed a median %.2f ms after its receive was posted (bound %.0f ms)", m, RNR_BOUND_MS);
	else
		OK(name, "median %.2f ms", m);
}

static void rconnect_poll(const char *addr)
{
	const char *name = "rconnect";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(7471) };
	inet_pton(AF_INET, addr, &sa.sin_addr);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || rbind(l, (struct sockaddr *)&sa, sizeof sa) || rlisten(l, 8) ||
	    rfcntl(l, F_SETFL, O_NONBLOCK)) {
		FAIL(name, "listener: %s", strerror(errno));
		return;
	}
	double took[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		int c = rsocket(AF_INET, SOCK_STREAM, 0), acc = -1;
		if (c < 0 || rfcntl(c, F_SETFL, O_NONBLOCK)) {
			FAIL(name, "rsocket: %s", strerror(errno));
			return;
		}
		double t0 = now_ms();
		if (rconnect(c, (struct sockaddr *)&sa, sizeof sa) && errno != EINPROGRESS) {
			FAIL(name, "rconnect: %s", strerror(errno));
			return;
		}
		for (;;) {
			struct pollfd p = { .fd = c, .events = POLLOUT };
			if (acc < 0) {
				acc = raccept(l, NULL, NULL);
				if (acc < 0 && errno != EAGAIN) {
					FAIL(name, "round %d: raccept: %s", r, strerror(errno));
					return;
				}
			}
			if (rpoll(&p, 1, 0) > 0 && (p.revents & POLLOUT) && acc >= 0)
				break;
			if (now_ms() - t0 > 5000) {
				FAIL(name, "round %d: not connected in 5 s", r);
				return;
			}
		}
		took[r] = now_ms() - t0;
		rclose(acc);
		rclose(c);
	}
	rclose(l);
	double m = median(took, ROUNDS);
	if (m > CONNECT_BOUND_MS)
		FAIL(name, "a non-blocking rconnect polled with rpoll(0) took a median %.2f ms (bound %.0f ms)", m, CONNECT_BOUND_MS);
	else
		OK(name, "median %.2f ms", m);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: onecpu ADDR\n");
		return 2;
	}
	rnr();
	rconnect_poll(argv[1]);
	return failures;
}
