/* slack.c: the library raises the timer slack of the Go runtime's monitor
 * thread (sysmon: of the threads the program did not start, the runtime's
 * first starts it first, so it is the second by thread ID) and leaves the
 * program's threads and the runtime's first thread the slack the program
 * started with. Arguments: the slack the program started with and the one
 * the monitor must have (ns). It checks its main thread, a thread it
 * starts before any call into the library, one it starts after, the
 * runtime's first thread and the monitor (reading other threads' slack
 * needs CAP_SYS_NICE), and that no thread but the runtime's has another
 * slack than the program's. Prints "ok NAME" or "FAIL NAME: why"; exits
 * with the number of failures. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <rdma/rdma_cma.h>

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static long own_slack(void) { return prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0); }

static long slack_of(int tid)
{
	char p[64];
	long v = -1;
	FILE *f;
	snprintf(p, sizeof(p), "/proc/%d/timerslack_ns", tid);
	f = fopen(p, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int tids(int *t, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;
	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max)
		if (e->d_name[0] != '.')
			t[n++] = atoi(e->d_name);
	closedir(d);
	qsort(t, n, sizeof(int), cmp);
	return n;
}

struct th {
	pthread_t t;
	long slack;
	int tid;
	int stop;
	pthread_mutex_t mu;
	pthread_cond_t cond;
};

static void *thread(void *arg)
{
	struct th *h = arg;
	pthread_mutex_lock(&h->mu);
	h->slack = own_slack();
	h->tid = (int)syscall(SYS_gettid);
	pthread_cond_broadcast(&h->cond);
	while (!h->stop)
		pthread_cond_wait(&h->cond, &h->mu);
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void start(struct th *h)
{
	memset(h, 0, sizeof(*h));
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cond, NULL);
	pthread_create(&h->t, NULL, thread, h);
	pthread_mutex_lock(&h->mu);
	while (!h->tid)
		pthread_cond_wait(&h->cond, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

static void stop(struct th *h)
{
	pthread_mutex_lock(&h->mu);
	h->stop = 1;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->t, NULL);
}

int main(int argc, char **argv)
{
	long want, monitor;
	struct th before, after;
	struct rdma_event_channel *ch;
	int t[256], rt[256], n, nrt, i, raised = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: slack PROGRAM_NS MONITOR_NS\n");
		return 100;
	}
	want = atol(argv[1]);
	monitor = atol(argv[2]);
	if (own_slack() != want)
		FAIL("main", "the main thread's slack is %ld ns, want %ld", own_slack(), want);
	else
		OK("main");
	start(&before);
	ch = rdma_create_event_channel(); /* the library's runtime is up */
	if (!ch) {
		perror("rdma_create_event_channel");
		return 100;
	}
	start(&after);
	if (before.slack != want || after.slack != want)
		FAIL("program_threads", "slack %ld ns (before any call), %ld (after), want %ld", before.slack,
		     after.slack, want);
	else
		OK("program_threads");
	n = tids(t, 256);
	for (i = 0, nrt = 0; i < n; i++)
		if (t[i] != getpid() && t[i] != before.tid && t[i] != after.tid)
			rt[nrt++] = t[i];
	if (n < 3 || t[0] != getpid() || nrt < 2) {
		FAIL("runtime_threads", "%d threads (%d the runtime's), the first %d (pid %d)", n, nrt, n ? t[0] : 0,
		     getpid());
	} else if (slack_of(rt[0]) != want || slack_of(rt[1]) != monitor) {
		FAIL("runtime_threads", "the runtime's first thread %ld ns (want %ld), the monitor %ld (want %ld)",
		     slack_of(rt[0]), want, slack_of(rt[1]), monitor);
	} else {
		OK("runtime_threads");
	}
	for (i = 0; i < n; i++) {
		long s = slack_of(t[i]);
		if (t[i] == before.tid || t[i] == after.tid || t[i] == getpid()) {
			if (s != want)
				FAIL("others", "program thread %d: %ld ns", t[i], s);
		} else if (s != want) {
			raised++;
		}
	}
	/* The monitor and the threads the runtime starts from it or from its
	 * first thread before the library's init; never most of them. */
	if (raised > n / 2 + 1 || (monitor == want && raised))
		FAIL("others", "%d of %d threads with another slack than %ld ns", raised, n, want);
	else
		OK("others");
	stop(&before);
	stop(&after);
	rdma_destroy_event_channel(ch);
	return failures;
}
