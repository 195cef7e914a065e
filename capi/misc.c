//go:build linux && cgo && softroce_capi

// misc.c: the string, rate and sysfs helpers of libibverbs, and what the
// library must export but softroce has no use for (the kernel-ABI copy
// helpers, driver registration, and the private IBVERBS_PRIVATE_* entry
// points vendor providers link against). None of these reaches the Go side
// except ibv_read_sysfs_file for softroce's own devices.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdbool.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sched.h>

#include "capi.h"
#include "_cgo_export.h"

#define SR_EXPORT __attribute__((visibility("default")))

SR_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	if (t < IBV_NODE_CA || t > IBV_NODE_UNSPECIFIED)
		return "unknown";
	return s[t];
}

SR_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};
	if (s < IBV_PORT_NOP || s > IBV_PORT_ACTIVE_DEFER)
		return "unknown";
	return n[s];
}

SR_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const n[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if (e < IBV_EVENT_CQ_ERR || e > IBV_EVENT_WQ_FATAL)
		return "unknown";
	return n[e];
}

SR_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const n[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if (s < IBV_WC_SUCCESS || s > IBV_WC_TM_RNDV_INCOMPLETE)
		return "unknown";
	return n[s];
}

SR_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	switch (rate) {
	case IBV_RATE_2_5_GBPS: return 1;
	case IBV_RATE_5_GBPS: return 2;
	case IBV_RATE_10_GBPS: return 4;
	case IBV_RATE_20_GBPS: return 8;
	case IBV_RATE_30_GBPS: return 12;
	case IBV_RATE_40_GBPS: return 16;
	case IBV_RATE_60_GBPS: return 24;
	case IBV_RATE_80_GBPS: return 32;
	case IBV_RATE_120_GBPS: return 48;
	case IBV_RATE_28_GBPS: return 11;
	case IBV_RATE_50_GBPS: return 20;
	case IBV_RATE_400_GBPS: return 160;
	case IBV_RATE_600_GBPS: return 240;
	case IBV_RATE_800_GBPS: return 320;
	case IBV_RATE_1200_GBPS: return 480;
	default: return -1;
	}
}

SR_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	switch (mult) {
	case 1: return IBV_RATE_2_5_GBPS;
	case 2: return IBV_RATE_5_GBPS;
	case 4: return IBV_RATE_10_GBPS;
	case 8: return IBV_RATE_20_GBPS;
	case 12: return IBV_RATE_30_GBPS;
	case 16: return IBV_RATE_40_GBPS;
	case 24: return IBV_RATE_60_GBPS;
	case 32: return IBV_RATE_80_GBPS;
	case 48: return IBV_RATE_120_GBPS;
	case 11: return IBV_RATE_28_GBPS;
	case 20: return IBV_RATE_50_GBPS;
	case 160: return IBV_RATE_400_GBPS;
	case 240: return IBV_RATE_600_GBPS;
	case 320: return IBV_RATE_800_GBPS;
	case 480: return IBV_RATE_1200_GBPS;
	default: return IBV_RATE_MAX;
	}
}

static const struct { enum ibv_rate r; int mbps; } sr_rates[] = {
	{ IBV_RATE_2_5_GBPS, 2500 }, { IBV_RATE_5_GBPS, 5000 }, { IBV_RATE_10_GBPS, 10000 },
	{ IBV_RATE_20_GBPS, 20000 }, { IBV_RATE_30_GBPS, 30000 }, { IBV_RATE_40_GBPS, 40000 },
	{ IBV_RATE_60_GBPS, 60000 }, { IBV_RATE_80_GBPS, 80000 }, { IBV_RATE_120_GBPS, 120000 },
	{ IBV_RATE_14_GBPS, 14062 }, { IBV_RATE_56_GBPS, 56250 }, { IBV_RATE_112_GBPS, 112500 },
	{ IBV_RATE_168_GBPS, 168750 }, { IBV_RATE_25_GBPS, 25781 }, { IBV_RATE_100_GBPS, 103125 },
	{ IBV_RATE_200_GBPS, 206250 }, { IBV_RATE_300_GBPS, 309375 }, { IBV_RATE_28_GBPS, 28125 },
	{ IBV_RATE_50_GBPS, 53125 }, { IBV_RATE_400_GBPS, 425000 }, { IBV_RATE_600_GBPS, 637500 },
	{ IBV_RATE_800_GBPS, 850000 }, { IBV_RATE_1200_GBPS, 1275000 },
};

SR_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	size_t i;
	for (i = 0; i < sizeof(sr_rates) / sizeof(sr_rates[0]); i++)
		if (sr_rates[i].r == rate)
			return sr_rates[i].mbps;
	return -1;
}

SR_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	size_t i;
	for (i = 0; i < sizeof(sr_rates) / sizeof(sr_rates[0]); i++)
		if (sr_rates[i].mbps == mbps)
			return sr_rates[i].r;
	return IBV_RATE_MAX;
}

/* ---- the descriptor table ----
 * Every completion channel is an eventfd, and rdma_create_qp makes two per
 * ID: a server that accepts a thousand connections opens two thousand.
 * Linux grows a process's descriptor table by doubling, and in a process
 * of more than one thread each doubling past 256 waits for an RCU grace
 * period (about 10 ms on a 2-core VM), inside whatever call opened the
 * descriptor: cmtime's create-qp or connect step. At load, while the
 * process has one thread (before the Go runtime starts its own, hence the
 * priority), the library grows the table once, which then waits for
 * nothing: to 4,096 descriptors, or the soft RLIMIT_NOFILE if lower.
 * The table costs 32 KiB of kernel memory; no descriptor stays open. */
__attribute__((constructor(101))) static void sr_grow_fdtable(void)
{
	struct rlimit rl;
	long want = 4096;
	int base, fd;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < want)
		want = (long)rl.rlim_cur;
	if (want <= 256)
		return;
	base = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (base < 0)
		return;
	fd = fcntl(base, F_DUPFD_CLOEXEC, (int)want - 1);
	if (fd >= 0)
		close(fd);
	close(base);
}

/* ---- the program's signals stay on the program's threads ----
 * A signal sent to the process goes to any thread that does not block it,
 * the library's Go threads included, and a handler installed without
 * SA_ONSTACK (perftest's SIGALRM for -D, most programs' handlers) then runs
 * on the small stack of whatever goroutine that thread was running: the
 * kernel's signal frame alone (about 3 KiB with AVX-512 state) overruns it
 * and the library crashes some time later ("unknown caller pc"). The Go
 * runtime gives every thread it makes the signal mask of the thread that
 * started it, which is the thread loading the library, inside this
 * constructor: so the constructor blocks every asynchronous signal before
 * the runtime's own constructor runs (priority 101 comes first), and the
 * one after it (sr_signals_back, unprioritized, linked after the runtime's)
 * gives the loading thread its mask back. The runtime unblocks on its
 * threads what it needs itself (SIGURG for preemption); the synchronous
 * signals (a fault in the thread) and SIGPROF (per-thread CPU profiling)
 * are never blocked; glibc keeps its internal ones. */
static sigset_t sr_loader_mask;
static int sr_loader_mask_saved;

__attribute__((constructor(101))) static void sr_signals_aside(void)
{
	static const int keep[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPIPE, SIGPROF, SIGURG};
	sigset_t set;
	size_t i;

	sigfillset(&set);
	for (i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		sigdelset(&set, keep[i]);
	if (pthread_sigmask(SIG_BLOCK, &set, &sr_loader_mask) == 0)
		sr_loader_mask_saved = 1;
}

__attribute__((constructor)) static void sr_signals_back(void)
{
	if (sr_loader_mask_saved)
		pthread_sigmask(SIG_SETMASK, &sr_loader_mask, NULL);
	sr_loader_mask_saved = 0;
}

/* ---- the runtime's monitor thread sleeps coarsely ----
 * The Go runtime's monitor thread (sysmon) sleeps 20 µs between looks
 * whenever it has just taken a processor back or been woken from its deep
 * sleep, and in a C program on the library both happen all the time: a C
 * thread that returns from a call keeps its processor until the monitor
 * takes it back, and a call after the process went idle wakes the monitor.
 * Each of those 20 µs sleeps is a wake-up, and on a machine where the
 * program's threads share a CPU with it, a preemption of them (stock
 * cmtime's server: a third of its CPU samples; docs/speed.md). The
 * runtime has no setting for it, but a thread's timer slack (how late the
 * kernel may end its timed sleeps; 50 µs by default) is inherited by the
 * threads it creates, and the monitor is the first thread the runtime's
 * own first thread creates. So the loading thread's slack is raised
 * before the runtime's constructor starts that first thread (priority 101
 * comes first) and given back after it (sr_slack_back, unprioritized,
 * linked after the runtime's); the first thread gives its own back in the
 * library's Go init (sr_slack_back_here, from capi/main.go), after the monitor
 * exists. The monitor then wakes at most every SR_MONITOR_SLACK_NS while
 * it looks often. The runtime threads that the first thread starts before
 * that init, or that the monitor (or one of them) starts at any time,
 * inherit the slack too, so their timed sleeps (a timer the runtime waits
 * for in the network poller) may end up to that much late: the kernel's
 * rxe keeps its timers in jiffies (1-4 ms). The
 * program's threads keep their slack. SOFTROCE_MONITOR_SLACK_NS chooses
 * another value (0: leave the slack alone); one that is not a number
 * leaves it alone too, and the device's open fails on it (devices.go). */
#define SR_MONITOR_SLACK_NS 200000UL
static unsigned long sr_loader_slack;
static int sr_loader_slack_saved;

__attribute__((constructor(101))) static void sr_slack_aside(void)
{
	unsigned long want = SR_MONITOR_SLACK_NS;
	const char *e = getenv("SOFTROCE_MONITOR_SLACK_NS");
	int cur;

	if (e && *e) {
		char *end;
		errno = 0;
		want = strtoul(e, &end, 10);
		if (*e < '0' || *e > '9' || *end != 0 || errno)
			return;
	}
	cur = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (want == 0 || cur < 0 || (unsigned long)cur >= want)
		return;
	if (prctl(PR_SET_TIMERSLACK, want, 0, 0, 0) == 0) {
		sr_loader_slack = (unsigned long)cur;
		sr_loader_slack_saved = 1;
	}
}

/* sr_slack_back_here gives the calling thread the loading thread's timer
 * slack: the loading thread itself (sr_slack_back), then the runtime's
 * first thread (the library's Go init). */
void sr_slack_back_here(void)
{
	if (sr_loader_slack_saved)
		prctl(PR_SET_TIMERSLACK, sr_loader_slack, 0, 0, 0);
}

__attribute__((constructor)) static void sr_slack_back(void)
{
	sr_slack_back_here();
}

/* ---- the program's handlers run on the signal stack ----
 * A program's thread that is inside the library (ibv_poll_cq in poll mode,
 * a blocking rdma_get_cm_event) runs Go code, on a goroutine's stack of a
 * few KiB; a signal it takes there runs the program's handler on that
 * stack unless the handler was installed with SA_ONSTACK, as the Go
 * runtime asks of every handler in a process it shares (it gives each
 * such thread an alternate signal stack). Most programs do not: perftest's
 * SIGALRM handler for -D reads /proc/stat with stdio, several KiB below a
 * goroutine's stack, and ib_read_bw -D crashed in one run of two. So the
 * library, when the program resolves these names to it (it comes before
 * libc in the program's search order; the version is glibc's on x86-64),
 * adds SA_ONSTACK to every handler installed through sigaction, signal,
 * bsd_signal and sysv_signal, and installs it with glibc's own
 * __sigaction. On a thread with no alternate stack the flag does nothing.
 * signal() is glibc's BSD semantics (SA_RESTART, the signal blocked in its
 * handler), without siginterrupt's record of signals that should not
 * restart. sigset is left to glibc. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

static int sr_is_handler(const struct sigaction *act)
{
	if (act->sa_flags & SA_SIGINFO)
		return act->sa_sigaction != NULL;
	return act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN && act->sa_handler != SIG_ERR;
}

/* Each is a non-default version of glibc's name (one @): the dynamic linker
 * binds programs' references to it, but a program linked against this
 * library takes these names from libc as always, so that it still runs on
 * rdma-core's libibverbs. */
__asm__(".symver sr_sigaction, sigaction@GLIBC_2.2.5");
__asm__(".symver sr_signal_bsd, signal@GLIBC_2.2.5");
__asm__(".symver sr_bsd_signal, bsd_signal@GLIBC_2.2.5");
__asm__(".symver sr_sysv_signal, sysv_signal@GLIBC_2.2.5");

SR_EXPORT int sr_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction a;

	if (act && sr_is_handler(act) && !(act->sa_flags & SA_ONSTACK)) {
		a = *act;
		a.sa_flags |= SA_ONSTACK;
		act = &a;
	}
	return __sigaction(sig, act, old);
}

static sighandler_t sr_signal(int sig, sighandler_t h, int flags, int block_self)
{
	struct sigaction a, o;

	if (h == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&a, 0, sizeof(a));
	a.sa_handler = h;
	sigemptyset(&a.sa_mask);
	if (block_self)
		sigaddset(&a.sa_mask, sig);
	a.sa_flags = flags;
	if (sr_sigaction(sig, &a, &o) < 0)
		return SIG_ERR;
	return o.sa_handler;
}

SR_EXPORT sighandler_t sr_signal_bsd(int sig, sighandler_t h) { return sr_signal(sig, h, SA_RESTART, 1); }

SR_EXPORT sighandler_t sr_bsd_signal(int sig, sighandler_t h) { return sr_signal(sig, h, SA_RESTART, 1); }

SR_EXPORT sighandler_t sr_sysv_signal(int sig, sighandler_t h)
{
	return sr_signal(sig, h, SA_RESETHAND | SA_NODEFER, 0);
}

/* The mask a thread had before sr_sig_hold, while it holds its signals. */
static __thread sigset_t sr_held_mask;
static __thread int sr_held;

int sr_sig_hold(void)
{
	sigset_t all;
	if (sr_held)
		return 0;
	sigfillset(&all);
	/* Never the faults (a fault with its signal blocked kills the process)
	 * nor what cannot be blocked; glibc keeps its own two out itself. */
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	sigdelset(&all, SIGTRAP);
	sigdelset(&all, SIGSYS);
	sigdelset(&all, SIGABRT);
	sigdelset(&all, SIGKILL);
	sigdelset(&all, SIGSTOP);
	if (pthread_sigmask(SIG_BLOCK, &all, &sr_held_mask) != 0)
		return 0;
	sr_held = 1;
	return 1;
}

void sr_sig_release(void)
{
	if (!sr_held)
		return;
	int e = errno; /* a handler run now must not change the call's errno */
	sr_held = 0;
	pthread_sigmask(SIG_SETMASK, &sr_held_mask, NULL); /* what arrived meanwhile is delivered now */
	errno = e;
}

/* sr_wait_mask is the mask of a wait: the thread's own (before
 * sr_sig_hold), with the Go runtime's SIGURG and SIGPROF blocked, so that
 * only the program's signals end it. */
static int sr_wait_mask(sigset_t *m)
{
	if (sr_held)
		*m = sr_held_mask;
	else if (pthread_sigmask(SIG_BLOCK, NULL, m) != 0)
		return -1;
	sigaddset(m, SIGURG);
	sigaddset(m, SIGPROF);
	return 0;
}

int sr_held_sigmask(uint64_t *m)
{
	sigset_t s;
	if (!sr_held || sr_wait_mask(&s) != 0)
		return 0;
	memcpy(m, &s, sizeof *m); /* glibc's sigset_t begins with the kernel's */
	return 1;
}

int sr_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	struct timespec ts, *tp = NULL;
	sigset_t m;

	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tp = &ts;
	}
	if (sr_wait_mask(&m) != 0)
		return poll(fds, n, timeout_ms);
	return ppoll(fds, n, tp, &m);
}

/* ---- fork without exec ----
 * The library is a Go program's runtime: its device engine runs on
 * threads a fork does not copy. A child that goes on using the library
 * (rather than exec a program) would find a device whose receive loop and
 * timers are gone and a runtime whose locks another thread may have held
 * at the fork, and hang; so the calls that start using a device (listing,
 * opening, allocating a PD, CQ or QP, registering memory) refuse, with one
 * line. fork then exec, and a child that never touches RDMA, are fine. */

static pid_t sr_loader_pid;
static volatile int sr_forked;

static void sr_atfork_child(void) { sr_forked = 1; }

__attribute__((constructor)) static void sr_watch_fork(void)
{
	sr_loader_pid = getpid();
	pthread_atfork(NULL, NULL, sr_atfork_child);
}

int sr_forked_child(const char *fn)
{
	static volatile int said;

	if (!sr_forked)
		return 0;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_SEQ_CST))
		fprintf(stderr, "softroce: %s in process %d, forked without exec from %d: the library cannot run in a "
				"forked child (its engine's threads stay in the parent); exec a program that opens the device\n",
			fn, (int)getpid(), (int)sr_loader_pid);
	errno = EOPNOTSUPP;
	return 1;
}

/* ---- a new thread's first call into the library ----
 * The Go runtime serves a C thread's first call with an M (its thread
 * record) from a list it keeps, and the thread that takes the list's last
 * one makes the next, inside its call: the first thread a program started
 * besides the one that loaded the library paid 245 µs (median) in its
 * first call on the 2-core VM measured, against 14 µs for later threads
 * (TestSpeedFirstCall). That call is the program's: stock cmtime's client
 * made it in its event thread's first rdma_get_cm_event, inside the timed
 * resolve step. Opening the first device (itself tens of ms) runs a thread
 * that calls into Go once and exits, giving its M back: the program's
 * first thread then finds one ready (48 µs). It blocks every signal: none
 * of the program's lands on it. The M it gives back keeps the processor
 * it last had (a C thread's M does, between calls) until sysmon takes it
 * or the next thread given that M takes it back in its first call, which
 * is what made the program's first thread fast: a stop of the world right
 * after the join, which frees that processor, made cmtime's resolve step
 * slower (22.8 against 9.1 µs a connection, 20 alternated pairs), and
 * three such threads at once, whose Ms then held both processors, made
 * its create-id and create-qp steps slower (create qp 27.5 against 16.4
 * µs). */
static void *sr_spare_m_main(void *arg)
{
	(void)arg;
	(void)srgo_num_comp_vectors();
	return NULL;
}

void sr_spare_ms(void)
{
	static int once;
	sigset_t all, old;
	pthread_t t;

	if (__atomic_exchange_n(&once, 1, __ATOMIC_SEQ_CST))
		return;
	sigfillset(&all);
	if (pthread_sigmask(SIG_BLOCK, &all, &old) != 0)
		return;
	if (pthread_create(&t, NULL, sr_spare_m_main, NULL) == 0)
		pthread_join(t, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- sysfs ---- */

SR_EXPORT const char *ibv_get_sysfs_path(void)
{
	const char *env = getenv("SYSFS_PATH");
	static char path[256];
	if (env) {
		snprintf(path, sizeof(path), "%s", env);
		while (strlen(path) > 1 && path[strlen(path) - 1] == '/')
			path[strlen(path) - 1] = 0;
		return path;
	}
	return "/sys";
}

/* ibv_read_sysfs_file answers for softroce's own devices from Go (their
 * files exist nowhere), and reads any other file as rdma-core does. */
SR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	int fd, len, n;

	if (!dir || !file || !buf || size == 0)
		return -1;
	n = srgo_read_sysfs((char *)dir, (char *)file, buf, (int)size);
	if (n != -2)
		return n;
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if ((size_t)len < size)
			buf[len] = '\0';
		else
			return -1;
	}
	return len;
}

SR_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct ibv_device *dev, const char *fnfmt, ...)
{
	(void)dev; (void)fnfmt;
	if (size)
		buf[0] = 0;
	errno = ENOENT;
	return -1;
}

/* ---- the kernel-ABI copy helpers (no kernel here: plain field copies) ---- */

struct sr_kern_ah_attr { /* struct ib_user_verbs_ah_attr */
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, reserved;
	uint16_t dlid;
	uint8_t sl, src_path_bits, static_rate, is_global, port_num, reserved2;
};

SR_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct sr_kern_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->dgid, 16);
	dst->grh.flow_label = src->flow_label;
	dst->grh.sgid_index = src->sgid_index;
	dst->grh.hop_limit = src->hop_limit;
	dst->grh.traffic_class = src->traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

SR_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, void *src)
{
	(void)dst; (void)src;
}

SR_EXPORT void ibv_copy_path_rec_from_kern(void *dst, void *src) { (void)dst; (void)src; }
SR_EXPORT void ibv_copy_path_rec_to_kern(void *dst, void *src) { (void)dst; (void)src; }

/* Providers register themselves with these; softroce loads none. */
SR_EXPORT void ibv_register_driver(const char *name, void *init_func) { (void)name; (void)init_func; }
SR_EXPORT void verbs_register_driver_34(const void *ops) { (void)ops; }

/* ---- IBVERBS_PRIVATE_34: entry points libmlx5 and libefa import. They run
 * only on those vendors' devices, which a softroce process never has; each
 * fails cleanly if called. ---- */

SR_EXPORT bool verbs_allow_disassociate_destroy;

#define SR_PRIVATE_STUB(name) \
	SR_EXPORT int name(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }

SR_PRIVATE_STUB(__ioctl_final_num_attrs)
SR_PRIVATE_STUB(execute_ioctl)
SR_PRIVATE_STUB(ibv_cmd_advise_mr)
SR_PRIVATE_STUB(ibv_cmd_alloc_dm)
SR_PRIVATE_STUB(ibv_cmd_alloc_mw)
SR_PRIVATE_STUB(ibv_cmd_alloc_pd)
SR_PRIVATE_STUB(ibv_cmd_attach_mcast)
SR_PRIVATE_STUB(ibv_cmd_close_xrcd)
SR_PRIVATE_STUB(ibv_cmd_create_ah)
SR_PRIVATE_STUB(ibv_cmd_create_counters)
SR_PRIVATE_STUB(ibv_cmd_create_cq)
SR_PRIVATE_STUB(ibv_cmd_create_cq_ex)
SR_PRIVATE_STUB(ibv_cmd_create_flow)
SR_PRIVATE_STUB(ibv_cmd_create_flow_action_esp)
SR_PRIVATE_STUB(ibv_cmd_create_qp)
SR_PRIVATE_STUB(ibv_cmd_create_qp_ex)
SR_PRIVATE_STUB(ibv_cmd_create_qp_ex2)
SR_PRIVATE_STUB(ibv_cmd_create_rwq_ind_table)
SR_PRIVATE_STUB(ibv_cmd_create_srq)
SR_PRIVATE_STUB(ibv_cmd_create_srq_ex)
SR_PRIVATE_STUB(ibv_cmd_create_wq)
SR_PRIVATE_STUB(ibv_cmd_dealloc_mw)
SR_PRIVATE_STUB(ibv_cmd_dealloc_pd)
SR_PRIVATE_STUB(ibv_cmd_dereg_mr)
SR_PRIVATE_STUB(ibv_cmd_destroy_ah)
SR_PRIVATE_STUB(ibv_cmd_destroy_counters)
SR_PRIVATE_STUB(ibv_cmd_destroy_cq)
SR_PRIVATE_STUB(ibv_cmd_destroy_flow)
SR_PRIVATE_STUB(ibv_cmd_destroy_flow_action)
SR_PRIVATE_STUB(ibv_cmd_destroy_qp)
SR_PRIVATE_STUB(ibv_cmd_destroy_rwq_ind_table)
SR_PRIVATE_STUB(ibv_cmd_destroy_srq)
SR_PRIVATE_STUB(ibv_cmd_destroy_wq)
SR_PRIVATE_STUB(ibv_cmd_detach_mcast)
SR_PRIVATE_STUB(ibv_cmd_free_dm)
SR_PRIVATE_STUB(ibv_cmd_get_context)
SR_PRIVATE_STUB(ibv_cmd_modify_cq)
SR_PRIVATE_STUB(ibv_cmd_modify_flow_action_esp)
SR_PRIVATE_STUB(ibv_cmd_modify_qp)
SR_PRIVATE_STUB(ibv_cmd_modify_qp_ex)
SR_PRIVATE_STUB(ibv_cmd_modify_srq)
SR_PRIVATE_STUB(ibv_cmd_modify_wq)
SR_PRIVATE_STUB(ibv_cmd_open_qp)
SR_PRIVATE_STUB(ibv_cmd_open_xrcd)
SR_PRIVATE_STUB(ibv_cmd_poll_cq)
SR_PRIVATE_STUB(ibv_cmd_post_recv)
SR_PRIVATE_STUB(ibv_cmd_post_send)
SR_PRIVATE_STUB(ibv_cmd_post_srq_recv)
SR_PRIVATE_STUB(ibv_cmd_query_context)
SR_PRIVATE_STUB(ibv_cmd_query_device_any)
SR_PRIVATE_STUB(ibv_cmd_query_mr)
SR_PRIVATE_STUB(ibv_cmd_query_port)
SR_PRIVATE_STUB(ibv_cmd_query_qp)
SR_PRIVATE_STUB(ibv_cmd_query_srq)
SR_PRIVATE_STUB(ibv_cmd_read_counters)
SR_PRIVATE_STUB(ibv_cmd_reg_dm_mr)
SR_PRIVATE_STUB(ibv_cmd_reg_dmabuf_mr)
SR_PRIVATE_STUB(ibv_cmd_reg_mr)
SR_PRIVATE_STUB(ibv_cmd_req_notify_cq)
SR_PRIVATE_STUB(ibv_cmd_rereg_mr)
SR_PRIVATE_STUB(ibv_cmd_resize_cq)
SR_PRIVATE_STUB(verbs_open_device)
SR_PRIVATE_STUB(verbs_init_cq)
SR_PRIVATE_STUB(verbs_set_ops)
SR_PRIVATE_STUB(verbs_uninit_context)

SR_EXPORT void *_verbs_init_and_alloc_context(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SR_EXPORT void __verbs_log(void *ctx, int level, const char *fmt, ...)
{
	(void)ctx; (void)level; (void)fmt;
}

/* ---- newer upstream nodes (IBVERBS_1.15-1.18): DMA handles, reg_mr_ex,
 * port speed, buffers and completion counters, which rxe's provider does
 * not implement either. ---- */

#define SR_NULL_STUB(name) \
	SR_EXPORT void *name(void) { errno = EOPNOTSUPP; return NULL; }
#define SR_FD_STUB(name) \
	SR_EXPORT int name(void) { errno = EOPNOTSUPP; return -1; }

SR_NULL_STUB(ibv_alloc_dmah)
SR_PRIVATE_STUB(ibv_dealloc_dmah)
SR_NULL_STUB(ibv_reg_mr_ex)
SR_FD_STUB(ibv_dm_export_dmabuf_fd)
SR_PRIVATE_STUB(ibv_query_port_speed)
SR_NULL_STUB(ibv_alloc_buf)
SR_EXPORT void ibv_free_buf(void *buf) { (void)buf; }
SR_NULL_STUB(ibv_reg_buf_mr)
SR_PRIVATE_STUB(_ibv_query_comp_cntr_caps)
SR_NULL_STUB(ibv_create_comp_cntr)
SR_PRIVATE_STUB(ibv_destroy_comp_cntr)
SR_FD_STUB(ibv_export_buf_dmabuf_fd)
SR_PRIVATE_STUB(ibv_inc_comp_cntr)
SR_PRIVATE_STUB(ibv_inc_err_comp_cntr)
SR_PRIVATE_STUB(ibv_qp_attach_comp_cntr)
SR_PRIVATE_STUB(ibv_read_comp_cntr)
SR_PRIVATE_STUB(ibv_read_err_comp_cntr)
SR_PRIVATE_STUB(ibv_set_comp_cntr)
SR_PRIVATE_STUB(ibv_set_err_comp_cntr)

/* ---- a loop that finds nothing to do gives the processor away ---- */

int sr_one_proc;

/* sr_idle_turn_now is sr_idle_turn's turn itself. */
void sr_idle_turn_now(int gocall)
{
	if (gocall && __atomic_load_n(&sr_one_proc, __ATOMIC_RELAXED))
		srgo_yield();
	else
		sched_yield();
}

static __thread unsigned int sr_idle_go_count;

void sr_idle_go(void)
{
	if (__atomic_load_n(&sr_one_proc, __ATOMIC_RELAXED))
		sr_idle_turn(&sr_idle_go_count, SR_IDLE_GO_EVERY, 1);
}
