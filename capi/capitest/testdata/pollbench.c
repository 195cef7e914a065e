/* pollbench.c: the cost of an empty ibv_poll_cq (perftest and UCX poll in
 * a tight loop), and of ibv_poll_cq + ibv_post_recv pairs; prints
 * "empty_poll_ns N". */
#include <stdio.h>
#include <time.h>
#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = ibv_open_device(l[0]);
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	struct ibv_wc wc[16];
	struct timespec a, b;
	const long n = 5000000;
	long i, got = 0;

	for (i = 0; i < 100000; i++)
		got += ibv_poll_cq(cq, 16, wc);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		got += ibv_poll_cq(cq, 16, wc);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("empty_poll_ns %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	ibv_destroy_cq(cq);
	ibv_close_device(c);
	ibv_free_device_list(l);
	return got != 0;
}
