/* forkchild: fork without exec after the library started (as Open MPI's
 * ranks and daemons may). The child's calls that would use a device, or
 * wait for its events, must fail at once with EOPNOTSUPP (one line on
 * stderr), not hang; fork then
 * exec must work, the exec'd program opening the device anew; the parent
 * goes on using its device. Prints "forkchild: OK" when all hold. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct ibv_context *open_first(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1)
		return NULL;
	struct ibv_context *c = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	return c;
}

static int child_status(pid_t p)
{
	int st;
	if (waitpid(p, &st, 0) != p)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	static char buf[4096];
	if (argc > 1 && strcmp(argv[1], "exec-child") == 0) {
		struct ibv_context *c = open_first();
		struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
		if (!pd)
			return 5;
		ibv_dealloc_pd(pd);
		return ibv_close_device(c) ? 6 : 0;
	}
	struct ibv_context *c = open_first();
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct ibv_comp_channel *ch = c ? ibv_create_comp_channel(c) : NULL;
	struct rdma_event_channel *ech = rdma_create_event_channel();
	if (!pd || !ch || !ech) {
		perror("forkchild: parent: open");
		return 1;
	}
	pid_t p = fork();
	if (p == 0) {
		int n = -1;
		struct ibv_cq *ecq;
		void *ectx;
		errno = 0;
		/* Waiting for the parent's events fails at once, too (it would
		 * block for ever: nothing in the child handles the device). */
		if (ibv_get_cq_event(ch, &ecq, &ectx) != -1 || errno != EOPNOTSUPP)
			_exit(8);
		struct rdma_cm_event *ev;
		errno = 0;
		if (rdma_get_cm_event(ech, &ev) != -1 || errno != EOPNOTSUPP)
			_exit(9);
		if (ibv_alloc_pd(c) != NULL || errno != EOPNOTSUPP)
			_exit(2);
		if (ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) != NULL || errno != EOPNOTSUPP)
			_exit(3);
		if (ibv_get_device_list(&n) != NULL || n != 0 || errno != EOPNOTSUPP)
			_exit(4);
		_exit(0);
	}
	int st = child_status(p);
	if (st != 0) {
		fprintf(stderr, "forkchild: the forked child's calls: status %d\n", st);
		return 1;
	}
	p = fork();
	if (p == 0) {
		execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
		_exit(7);
	}
	st = child_status(p);
	if (st != 0) {
		fprintf(stderr, "forkchild: fork then exec: status %d\n", st);
		return 1;
	}
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!cq || !mr) {
		perror("forkchild: parent after the forks");
		return 1;
	}
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	rdma_destroy_event_channel(ech);
	ibv_dealloc_pd(pd);
	if (ibv_close_device(c)) {
		perror("forkchild: close");
		return 1;
	}
	printf("forkchild: OK\n");
	return 0;
}
