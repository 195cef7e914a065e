/* rs_compat.c: rsockets behaviour of librdmacm that programs rely on,
 * through the library in one process: a signal (handler without
 * SA_RESTART) ends a blocking rrecv, raccept and rpoll with EINTR, and
 * the Go runtime's SIGURG does not, and a signal landing while the library
 * works between two waits of the call does too;
 * rconnect called again answers EINPROGRESS while connecting and 0 once
 * connected; rclose of a socket still connecting returns at once. Prints
 * "ok NAME" or "FAIL NAME: why"; exits with the number of failures.
 * Argument: the device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rsocket.h>

static int failures;
static struct sockaddr_in addr;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void on_alarm(int sig) { (void)sig; }

static pthread_t main_thread;
static volatile int returned, alarm_sent;

/* kick sends SIGALRM to the main thread 200 ms from now, after ten SIGURG
 * (the Go runtime's preemption signal, which it may send to a thread that
 * has just left the library: it must not end the call); if the call it
 * should interrupt has not returned 3 s later, it ends the call by other
 * means (arg: a function doing so), so that the check fails rather than
 * hangs. */
static void *kick(void *arg)
{
	int i;
	alarm_sent = 0;
	usleep(50000);
	for (i = 0; i < 10; i++) {
		pthread_kill(main_thread, SIGURG);
		usleep(10000);
	}
	usleep(50000);
	alarm_sent = 1;
	pthread_kill(main_thread, SIGALRM);
	for (i = 0; i < 300 && !returned; i++)
		usleep(10000);
	if (!returned && arg)
		((void (*)(void))arg)();
	return NULL;
}

static int unblock_s = -1;
static struct sockaddr_in unblock_addr;

/* unblock_recv sends a byte to the waiting receiver. */
static void unblock_recv(void) { rsend(unblock_s, "x", 1, 0); }

/* unblock_accept connects to the waiting listener. */
static void unblock_accept(void)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	rconnect(c, (struct sockaddr *)&unblock_addr, sizeof(unblock_addr));
}

/* pair makes a connected pair of rsockets: *c (client) and *s (server). */
static int pair(uint16_t port, int *l, int *c, int *s)
{
	struct sockaddr_in a = addr;
	a.sin_port = htons(port);
	*l = rsocket(AF_INET, SOCK_STREAM, 0);
	*c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (*l < 0 || *c < 0 || rbind(*l, (struct sockaddr *)&a, sizeof(a)) || rlisten(*l, 4) ||
	    rconnect(*c, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	*s = raccept(*l, NULL, NULL);
	return *s < 0 ? -1 : 0;
}

/* eintr: a signal ends each blocking call with EINTR. */
static void test_eintr(uint16_t port)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */
	int l, c, s, r;
	char b[16];
	pthread_t t;
	struct pollfd p;
	double t0;

	sigaction(SIGALRM, &sa, NULL);
	main_thread = pthread_self();
	if (pair(port, &l, &c, &s)) {
		FAIL("eintr", "set-up: %s", strerror(errno));
		return;
	}

	unblock_s = s;
	unblock_addr = addr;
	unblock_addr.sin_port = htons(port);
	returned = 0;
	pthread_create(&t, NULL, kick, (void *)unblock_recv);
	r = (int)rrecv(c, b, sizeof(b), 0);
	returned = 1;
	if (r != -1 || errno != EINTR || !alarm_sent)
		FAIL("eintr_rrecv", "rrecv: %d, errno %d, want -1 EINTR (by SIGALRM: %d)", r, errno, alarm_sent);
	else
		OK("eintr_rrecv");
	pthread_join(t, NULL);

	returned = 0;
	pthread_create(&t, NULL, kick, (void *)unblock_accept);
	r = raccept(l, NULL, NULL);
	returned = 1;
	if (r != -1 || errno != EINTR || !alarm_sent)
		FAIL("eintr_raccept", "raccept: %d, errno %d, want -1 EINTR (by SIGALRM: %d)", r, errno, alarm_sent);
	else
		OK("eintr_raccept");
	pthread_join(t, NULL);

	returned = 0;
	pthread_create(&t, NULL, kick, NULL);
	p.fd = c;
	p.events = POLLIN;
	t0 = now();
	r = rpoll(&p, 1, 3000);
	returned = 1;
	if (r != -1 || errno != EINTR || !alarm_sent)
		FAIL("eintr_rpoll", "rpoll: %d after %.1f s, errno %d, want -1 EINTR (by SIGALRM: %d)", r, now() - t0,
		     errno, alarm_sent);
	else
		OK("eintr_rpoll");
	pthread_join(t, NULL);

	/* The socket still works after the interrupted calls. */
	if (rsend(s, "hi", 3, 0) != 3 || rrecv(c, b, sizeof(b), 0) != 3 || strcmp(b, "hi"))
		FAIL("eintr_after", "send and receive after EINTR: %s", strerror(errno));
	rclose(s);
	rclose(c);
	rclose(l);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGALRM, &sa, NULL);
}

/* eintr_window: a signal ends a blocking rrecv with EINTR whenever it lands
 * in the call, also while the library works between its waits (the spin
 * before the first, the Go side's work, a wait's bound running out), not
 * only while the thread sleeps: 300 signals, each sent 0-40 us after the
 * call began. A signal taken between two waits used to be lost to the
 * call, which then waited on (here until a byte came 500 ms later). */
static volatile int window_go, window_in_call, window_seen;

static void on_window(int sig)
{
	(void)sig;
	if (window_in_call)
		window_seen = 1;
}

static void *window_kick(void *arg)
{
	unsigned int seed = (unsigned int)(uintptr_t)arg;
	double t0, d = (rand_r(&seed) % 41) / 1e6;
	int i;
	while (!window_go)
		;
	t0 = now();
	while (now() - t0 < d)
		;
	pthread_kill(main_thread, SIGALRM);
	for (i = 0; i < 50 && !returned; i++)
		usleep(10000);
	if (!returned)
		rsend(unblock_s, "x", 1, 0);
	return NULL;
}

static void test_eintr_window(uint16_t port)
{
	struct sigaction sa = { .sa_handler = on_window }; /* no SA_RESTART */
	int l, c, s, r, i, lost = 0, other = 0, early = 0;
	char b[16];
	pthread_t t;

	sigaction(SIGALRM, &sa, NULL);
	main_thread = pthread_self();
	if (pair(port, &l, &c, &s)) {
		FAIL("eintr_window", "set-up: %s", strerror(errno));
		return;
	}
	unblock_s = s;
	for (i = 0; i < 300; i++) {
		returned = 0;
		window_go = 0;
		window_seen = 0;
		pthread_create(&t, NULL, window_kick, (void *)(uintptr_t)(i * 2654435761u + 1));
		window_in_call = 1;
		window_go = 1;
		r = (int)rrecv(c, b, sizeof(b), 0);
		window_in_call = 0;
		returned = 1;
		pthread_join(t, NULL);
		if (r == -1 && errno == EINTR)
			continue;
		if (!window_seen)
			early++; /* taken before the call began: not the library's */
		else if (r == 1)
			lost++;
		else
			other++;
	}
	if (lost || other || early > 30)
		FAIL("eintr_window", "%d of 300 signals lost to a blocking rrecv (it waited on), %d other results, %d before the call",
		     lost, other, early);
	else
		OK("eintr_window");
	rclose(s);
	rclose(c);
	rclose(l);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGALRM, &sa, NULL);
}

/* rconnect_again: a non-blocking rconnect called until it returns 0 (the
 * rsockets idiom): EINPROGRESS while connecting, 0 once connected, and 0
 * again after that (librdmacm's rs_do_connect). */
static void test_rconnect_again(uint16_t port)
{
	const char *name = "rconnect_again";
	struct sockaddr_in a = addr;
	int l = rsocket(AF_INET, SOCK_STREAM, 0), c = rsocket(AF_INET, SOCK_STREAM, 0), r, i;
	a.sin_port = htons(port);
	if (l < 0 || c < 0 || rbind(l, (struct sockaddr *)&a, sizeof(a)) || rlisten(l, 4) ||
	    rfcntl(c, F_SETFL, O_NONBLOCK)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	for (i = 0; i < 5000; i++) {
		r = rconnect(c, (struct sockaddr *)&a, sizeof(a));
		if (r == 0)
			break;
		if (errno != EINPROGRESS) {
			FAIL(name, "rconnect: errno %d, want EINPROGRESS until connected", errno);
			break;
		}
		usleep(1000);
	}
	if (r == 0) {
		if (rconnect(c, (struct sockaddr *)&a, sizeof(a)) != 0)
			FAIL(name, "rconnect once connected: errno %d, want 0", errno);
		else
			OK(name);
	} else if (i == 5000)
		FAIL(name, "not connected after 5 s");
	rclose(c);
	rclose(l);
}

/* rclose_connecting: rconnect called again on a socket whose connect has
 * no answer (an address nobody serves) answers EINPROGRESS, and rclose of
 * it returns at once, as librdmacm frees it. */
static void test_rclose_connecting(void)
{
	const char *name = "rclose_connecting";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(7471) };
	int c = rsocket(AF_INET, SOCK_STREAM, 0), r;
	double t0;
	inet_pton(AF_INET, "127.60.250.250", &a.sin_addr);
	if (c < 0 || rfcntl(c, F_SETFL, O_NONBLOCK)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	r = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	if (r != -1 || errno != EINPROGRESS) {
		FAIL(name, "rconnect: %d, errno %d, want EINPROGRESS", r, errno);
		rclose(c);
		return;
	}
	r = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	if (r != -1 || errno != EINPROGRESS) {
		FAIL(name, "rconnect again while connecting: %d, errno %d, want EINPROGRESS (librdmacm)", r, errno);
		rclose(c);
		return;
	}
	usleep(100000);
	t0 = now();
	rclose(c);
	if (now() - t0 > 5)
		FAIL(name, "rclose took %.1f s", now() - t0);
	else
		OK(name);
}

int main(int argc, char **argv)
{
	uint16_t port = 14000 + (getpid() % 1000) * 2;
	if (argc < 2)
		return 2;
	addr.sin_family = AF_INET;
	inet_pton(AF_INET, argv[1], &addr.sin_addr);
	test_eintr(port);
	test_eintr_window(port + 2);
	test_rconnect_again(port + 1);
	test_rclose_connecting();
	return failures;
}
