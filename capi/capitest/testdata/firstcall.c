/* firstcall: how long a new thread's first call into the library takes,
 * against a later thread's (TestSpeedFirstCall). After ibv_open_device it
 * starts one thread at a time, each timing its first ibv_query_qp (a call
 * into Go) and then a second one, and prints
 *   thread N: first_us F second_us S */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <infiniband/verbs.h>

static struct ibv_qp *qp;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *probe(void *arg)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	double t0 = now_us(), t1, t2;

	ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	t1 = now_us();
	ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	t2 = now_us();
	printf("thread %ld: first_us %.1f second_us %.1f\n", (long)arg, t1 - t0, t2 - t1);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3, num;
	struct ibv_device **l = ibv_get_device_list(&num);
	struct ibv_context *c;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC };

	if (!l || num < 1 || !(c = ibv_open_device(l[0])) || !(pd = ibv_alloc_pd(c)) ||
	    !(cq = ibv_create_cq(c, 2, NULL, NULL, 0))) {
		perror("firstcall: open");
		return 1;
	}
	a.send_cq = a.recv_cq = cq;
	a.cap.max_send_wr = a.cap.max_recv_wr = a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (!(qp = ibv_create_qp(pd, &a))) {
		perror("firstcall: ibv_create_qp");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, probe, (void *)i) || pthread_join(t, NULL)) {
			perror("firstcall: pthread");
			return 1;
		}
	}
	return 0;
}
