/* signals.c: the program's signals and the library's threads. A program's
 * handler, installed the usual way (signal(), no SA_ONSTACK), must never
 * run on a goroutine's small stack: the library's own threads block the
 * program's signals (the loading thread's mask is left as it was), and the
 * library adds SA_ONSTACK to the handlers the program installs, so that a
 * signal taken while the program's thread is inside the library runs on
 * that thread's alternate stack. The last case runs a stack-hungry SIGALRM
 * handler (as perftest's -D, which reads /proc/stat with stdio) every
 * 200 µs while the main thread polls a CQ, which polls the device's link in
 * Go: before both fixes it crashed within a second.
 * Prints "ok NAME" or "FAIL NAME: why"; exits with the number of failures. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <infiniband/verbs.h>

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static volatile sig_atomic_t alarms;
static volatile char sink;

static void on_alarm(int sig)
{
	char buf[12288];
	FILE *f;

	(void)sig;
	memset(buf, (int)alarms, sizeof(buf));
	/* what perftest's handler does: stdio on a /proc file */
	f = fopen("/proc/self/stat", "r");
	if (f) {
		if (fgets(buf, 1024, f))
			sink = buf[0];
		fclose(f);
	}
	sink ^= buf[sizeof(buf) - 1];
	alarms++;
}

/* Every thread but the main one (the library's) blocks SIGALRM. */
static void test_thread_masks(void)
{
	char path[300], line[256];
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");
	pid_t self = (pid_t)syscall(SYS_gettid);
	int others = 0, open = 0;

	while (d && (e = readdir(d))) {
		unsigned long long blk;
		FILE *f;

		if (e->d_name[0] == '.' || atoi(e->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "SigBlk: %llx", &blk) == 1) {
				others++;
				if (!(blk & (1ULL << (SIGALRM - 1))))
					open++;
			}
		fclose(f);
	}
	if (d)
		closedir(d);
	if (others == 0)
		FAIL("thread_masks", "no library threads");
	else if (open)
		FAIL("thread_masks", "%d of the library's %d threads take SIGALRM", open, others);
	else
		OK("thread_masks");
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	struct sigaction sa;
	struct itimerval it = { .it_interval = { 0, 200 }, .it_value = { 0, 200 } };
	struct timespec t0, t;
	sigset_t m;

	/* the loading thread's mask is as the program left it */
	pthread_sigmask(SIG_BLOCK, NULL, &m);
	if (sigismember(&m, SIGALRM) || sigismember(&m, SIGINT) || sigismember(&m, SIGTERM))
		FAIL("main_mask", "the library left signals blocked in the loading thread");
	else
		OK("main_mask");

	list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])) || !(pd = ibv_alloc_pd(ctx)) ||
	    !(cq = ibv_create_cq(ctx, 16, NULL, NULL, 0))) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	{
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
							.max_recv_sge = 1 } };
		if (!(qp = ibv_create_qp(pd, &ia))) {
			printf("FAIL setup: %s\n", strerror(errno));
			return 1;
		}
	}
	test_thread_masks();

	/* SA_ONSTACK added to signal()'s handler and to sigaction's */
	signal(SIGALRM, on_alarm);
	if (sigaction(SIGALRM, NULL, &sa) || !(sa.sa_flags & SA_ONSTACK) || !(sa.sa_flags & SA_RESTART) ||
	    sa.sa_handler != on_alarm)
		FAIL("signal_onstack", "flags %#x", (unsigned)sa.sa_flags);
	else
		OK("signal_onstack");
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGUSR1, &sa, NULL);
	memset(&sa, 0, sizeof(sa));
	if (sigaction(SIGUSR1, NULL, &sa) || !(sa.sa_flags & SA_ONSTACK) || (sa.sa_flags & SA_RESTART))
		FAIL("sigaction_onstack", "flags %#x", (unsigned)sa.sa_flags);
	else
		OK("sigaction_onstack");
	signal(SIGUSR1, SIG_DFL);

	/* a busy handler while the main thread polls in the library */
	setitimer(ITIMER_REAL, &it, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		ibv_poll_cq(cq, 1, &wc);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000000L);
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_REAL, &it, NULL);
	if (alarms < 100)
		FAIL("busy_handler", "%d alarms in 2 s", (int)alarms);
	else
		OK("busy_handler");

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failures;
}
