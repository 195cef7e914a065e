/* idle.c: a thread blocked in rdma_get_cm_event, ibv_get_cq_event or rrecv while
 * nothing happens sleeps, as on the kernel's ucma and uverbs files: its
 * waits inside the library, bounded so that a lost wake-up cannot hang it,
 * grow longer while they end with nothing (100 ms doubling to 1.6 s), so
 * that an idle server does not wake ten times a second. Each case lets the
 * thread wait idle for IDLE_MS, counts its voluntary context switches over
 * the last part of it (a fixed 100 ms bound gives about 20; one wait that
 * doubles, 3 or 4), then makes the event it waits for and checks that the
 * thread has it within 500 ms: a longer wait must not delay a wake-up.
 * Prints "ok NAME" or "FAIL NAME: why"; exits with the number of failures.
 * Argument: the device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/syscall.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#define IDLE_MS 2500
#define COUNT_FROM_MS 300 /* the count starts after the first waits */
#define MAX_SWITCHES 10
#define MAX_LATENCY_MS 500

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* switches returns thread tid's voluntary context switches, -1 if unknown. */
static long switches(pid_t tid)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* A waiter: the thread blocked in wait(arg), its id and when it returned. */
struct waiter {
	int (*wait)(struct waiter *);
	void *arg;
	volatile pid_t tid;
	volatile double done_ms;
	int ret;
};

static void *waiter_main(void *p)
{
	struct waiter *w = p;

	w->tid = (pid_t)syscall(SYS_gettid);
	w->ret = w->wait(w);
	w->done_ms = now_ms();
	return NULL;
}

/* idle_then runs w's thread, leaves it idle for IDLE_MS, checks its
 * switches, calls wake, and checks that the thread returned soon after. */
static void idle_then(const char *name, struct waiter *w, int (*wake)(void *), void *arg)
{
	pthread_t t;
	long s0, s1;
	double t0;

	if (pthread_create(&t, NULL, waiter_main, w)) {
		FAIL(name, "pthread_create");
		return;
	}
	while (!w->tid)
		sleep_ms(1);
	sleep_ms(COUNT_FROM_MS);
	s0 = switches(w->tid);
	sleep_ms(IDLE_MS - COUNT_FROM_MS);
	s1 = switches(w->tid);
	if (w->done_ms) {
		FAIL(name, "the wait returned (%d) with nothing to return", w->ret);
		pthread_join(t, NULL);
		return;
	}
	t0 = now_ms();
	if (wake(arg)) {
		FAIL(name, "making the event: %s", strerror(errno));
		pthread_cancel(t);
		pthread_join(t, NULL);
		return;
	}
	for (int i = 0; i < 5000 && !w->done_ms; i++)
		sleep_ms(1);
	if (!w->done_ms) {
		FAIL(name, "no return 5 s after the event");
		pthread_cancel(t);
		pthread_join(t, NULL);
		return;
	}
	pthread_join(t, NULL);
	if (w->ret)
		FAIL(name, "the wait failed: %s", strerror(w->ret));
	else if (s0 < 0 || s1 < 0)
		FAIL(name, "cannot read the thread's switches");
	else if (s1 - s0 > MAX_SWITCHES)
		FAIL(name, "%ld context switches in %d ms of nothing, want at most %d", s1 - s0,
		     IDLE_MS - COUNT_FROM_MS, MAX_SWITCHES);
	else if (w->done_ms - t0 > MAX_LATENCY_MS)
		FAIL(name, "returned %.0f ms after the event, want within %d", w->done_ms - t0, MAX_LATENCY_MS);
	else {
		printf("# %s: %ld switches idle, returned %.2f ms after the event\n", name, s1 - s0, w->done_ms - t0);
		OK(name);
	}
}

static struct sockaddr_in addr;

/* The CM case: the thread waits in rdma_get_cm_event; the event is the
 * ADDR_RESOLVED of an ID resolved toward the device's own address. */
static int cm_wait(struct waiter *w)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(w->arg, &ev))
		return errno;
	if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		printf("# event %s\n", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		return EPROTO;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int cm_wake(void *id)
{
	struct sockaddr_in dst = addr;

	dst.sin_port = htons(9);
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
}

static void test_cm(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct waiter w = { .wait = cm_wait };

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		FAIL("cm_idle_wait", "setup: %s", strerror(errno));
		return;
	}
	w.arg = ch;
	idle_then("cm_idle_wait", &w, cm_wake, id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* The CQ case: the thread waits in ibv_get_cq_event on an armed CQ; the
 * event is the flush completion of a receive posted to a QP that then goes
 * to the error state. */
struct cq_case {
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static int cq_wait(struct waiter *w)
{
	struct cq_case *c = w->arg;
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(c->cc, &cq, &ctx))
		return errno ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	return cq == c->cq ? 0 : EPROTO;
}

static int cq_wake(void *p)
{
	struct cq_case *c = p;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	errno = ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	return errno != 0;
}

static void test_cq(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct cq_case c = { 0 };
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	static char buf[64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf) };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct waiter w = { .wait = cq_wait, .arg = &c };
	struct ibv_wc wc;

	if (list)
		ibv_free_device_list(list);
	if (!mr || !(c.cc = ibv_create_comp_channel(ctx)) || !(c.cq = ibv_create_cq(ctx, 4, NULL, c.cc, 0))) {
		FAIL("cq_idle_wait", "setup: %s", strerror(errno));
		return;
	}
	qa.send_cq = qa.recv_cq = c.cq;
	sge.lkey = mr->lkey;
	if (!(c.qp = ibv_create_qp(pd, &qa)) ||
	    ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
	    ibv_post_recv(c.qp, &wr, &bad) || ibv_req_notify_cq(c.cq, 0)) {
		FAIL("cq_idle_wait", "setup: %s", strerror(errno));
		return;
	}
	idle_then("cq_idle_wait", &w, cq_wake, &c);
	while (ibv_poll_cq(c.cq, 1, &wc) > 0)
		;
	ibv_destroy_qp(c.qp);
	ibv_destroy_cq(c.cq);
	ibv_destroy_comp_channel(c.cc);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* The rsocket case: the thread waits in a blocking rrecv on a connected
 * rsocket; the event is one byte its peer sends. */
struct rs_case {
	int l, c, s;
};

static int rs_wait(struct waiter *w)
{
	struct rs_case *r = w->arg;
	char b;
	ssize_t n = rrecv(r->s, &b, 1, 0);

	if (n < 0)
		return errno;
	return n == 1 && b == 'x' ? 0 : EPROTO;
}

static int rs_wake(void *p)
{
	struct rs_case *r = p;

	return rsend(r->c, "x", 1, 0) == 1 ? 0 : -1;
}

static void test_rs(void)
{
	struct rs_case r = { -1, -1, -1 };
	struct sockaddr_in a = addr;
	struct waiter w = { .wait = rs_wait, .arg = &r };

	a.sin_port = htons(9000 + getpid() % 1000);
	r.l = rsocket(AF_INET, SOCK_STREAM, 0);
	r.c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (r.l < 0 || r.c < 0 || rbind(r.l, (struct sockaddr *)&a, sizeof(a)) || rlisten(r.l, 4) ||
	    rconnect(r.c, (struct sockaddr *)&a, sizeof(a)) || (r.s = raccept(r.l, NULL, NULL)) < 0) {
		FAIL("rs_idle_wait", "setup: %s", strerror(errno));
		return;
	}
	idle_then("rs_idle_wait", &w, rs_wake, &r);
	rclose(r.s);
	rclose(r.c);
	rclose(r.l);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	addr.sin_family = AF_INET;
	inet_pton(AF_INET, argv[1], &addr.sin_addr);
	test_cm();
	test_cq();
	test_rs();
	return failures;
}
