/* guest.c: the library as a guest in someone else's process. The program
 * installs its own SIGUSR1 and SIGSEGV handlers without SA_ONSTACK (as UCX
 * and Open MPI do) while another thread signals the process thousands of
 * times during verbs calls; then it forks and execs a child while the
 * device is open, and keeps using the device. Prints "ok NAME" or
 * "FAIL NAME: why"; exits with the number of failures. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static volatile long hits;
static int failures;

static void handler(int s)
{
	char buf[2048];
	(void)s;
	memset(buf, 1, sizeof(buf));
	hits += buf[100];
}

static void *kicker(void *p)
{
	(void)p;
	for (int i = 0; i < 5000; i++) {
		kill(getpid(), SIGUSR1);
		usleep(100);
	}
	return NULL;
}

int main(void)
{
	struct sigaction sa;
	struct ibv_device **l;
	struct ibv_context *c;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	pthread_t t;
	pid_t pid;
	int st;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
	l = ibv_get_device_list(NULL);
	c = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!c) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(c);
	cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	pthread_create(&t, NULL, kicker, NULL);
	for (int i = 0; i < 500000; i++)
		ibv_poll_cq(cq, 1, &wc);
	for (int i = 0; i < 5000; i++) {
		struct ibv_mr *m = ibv_reg_mr(pd, &wc, sizeof(wc), IBV_ACCESS_LOCAL_WRITE);
		if (!m || ibv_dereg_mr(m)) {
			printf("FAIL signals: reg/dereg %d: %s\n", i, strerror(errno));
			failures++;
			break;
		}
	}
	pthread_join(t, NULL);
	if (hits == 0) {
		printf("FAIL signals: the program's handler never ran\n");
		failures++;
	} else {
		printf("ok signals (%ld handled)\n", hits);
	}

	pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
		_exit(99);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 7) {
		printf("FAIL fork_exec: child status %d\n", st);
		failures++;
	} else {
		struct ibv_mr *m = ibv_reg_mr(pd, &wc, sizeof(wc), IBV_ACCESS_LOCAL_WRITE);
		if (!m || ibv_dereg_mr(m)) {
			printf("FAIL fork_exec: the parent's device after the child: %s\n", strerror(errno));
			failures++;
		} else {
			printf("ok fork_exec\n");
		}
	}
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	return failures;
}
