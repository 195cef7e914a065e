//go:build linux && cgo && softroce_capi

// capi.h: the private structs that follow the public libibverbs structs a
// program reads. Each public struct comes first, so a program's pointer is
// also a pointer to ours; the uintptr_t handle names the Go object.
#ifndef SOFTROCE_CAPI_H
#define SOFTROCE_CAPI_H

#include <stdint.h>
#include <stddef.h>
#include <pthread.h>
#include <poll.h>
#include <string.h>
#include <infiniband/verbs.h>

#define SR_MAX_DEVICES 64

struct sr_device {
	struct ibv_device dev;
	// Room for what rdma-core's struct verbs_device keeps after ibv_device
	// (the driver ops pointer mlx5dv_is_supported compares): zero.
	char verbs_device_room[512];
	int index;
	uint64_t guid;
};

struct sr_context {
	uintptr_t h;
	int closed;
	struct verbs_context vctx; /* must be last: ibv_context is its last member */
};

struct sr_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

struct sr_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

struct sr_mw {
	struct ibv_mw mw;
	uintptr_t h;
};

struct sr_ah {
	struct ibv_ah ah;
	uintptr_t h;
};

struct sr_comp_channel {
	struct ibv_comp_channel ch;
	uintptr_t h;
};

struct sr_cq {
	struct ibv_cq_ex cqx; /* every CQ is an ibv_cq_ex */
	uintptr_t h;
	struct ibv_wc cur;     /* the completion the extended poll API is on */
	int32_t pending;       /* completions waiting, kept by Go (verbs.CQ.MirrorLen) */
	int32_t rxpoll;        /* a QP uses it: an empty poll polls the device's link (Go sets it) */
};

struct sr_srq {
	struct ibv_srq srq;
	uintptr_t h;
	uint32_t srq_num;
};

/* The ibv_wr_* post API builds work requests in slots; wr_complete posts
 * them. A slot is a struct sr_wr_slot, then its SGE array (max_sge), then
 * its inline bytes (max_inline): the setters copy what they are given, as
 * rxe copies into the WQE, so the program may reuse its buffers at once.
 * The slot array grows with realloc, so slots hold no pointers into it
 * while a batch is built: wr_complete links next and sg_list. */
struct sr_wr_slot {
	struct ibv_send_wr wr;
	int32_t inl; /* bytes of inline data in the slot, or -1 */
};

struct sr_wr_batch {
	int n;          /* slots used */
	int cap;        /* slots allocated */
	int err;        /* the first builder error: wr_complete returns it */
	size_t stride;  /* bytes per slot */
	uint32_t max_wr, max_sge, max_inline; /* the QP's send caps */
	char *slots;
};

struct sr_qp {
	struct ibv_qp_ex qpx; /* every QP is an ibv_qp_ex */
	uintptr_t h;
	struct sr_wr_batch *batch; /* the ibv_wr_* API: set for a QP made with send ops */
	pthread_mutex_t batch_mu;
	int is_ex; /* made by the provider's create_qp_ex: ibv_qp_to_qp_ex answers it */
};

/* sr_wait_acked waits, as rdma-core's destroy calls do, until the program
 * has acknowledged every event of an object handed to it (*done, counted
 * under mu, reaching want). */
/* sr_forked_child reports (once, on stderr) and refuses a call made by a
 * process forked without exec from one that loaded the library: the
 * library's engine (Go's threads) did not survive the fork. It sets errno
 * to EOPNOTSUPP and returns 1 in such a child, 0 elsewhere (misc.c). */
int sr_forked_child(const char *fn);

/* sr_spare_ms has the Go runtime make a thread record ahead for the
 * program's first thread to call in, once per process (misc.c). */
void sr_spare_ms(void);

/* sr_poll is poll(2) for the library's blocking waits on a program's
 * thread: only the program's signals end it with EINTR. The Go runtime
 * sends SIGURG (preemption) to a thread it saw running Go, and the thread
 * may have gone back to C and into this wait by the time it lands; it and
 * SIGPROF stay blocked for the wait (ppoll) and are taken after it. */
int sr_poll(struct pollfd *fds, nfds_t n, int timeout_ms);

/* sr_sig_hold blocks the program's asynchronous signals on this thread for
 * the rest of a blocking call that is about to wait, and sr_sig_release
 * ends that; the call's waits (sr_poll, and link/udp's through
 * sr_held_sigmask) unblock them, so that a signal arriving while the call
 * runs between waits stays pending and ends the next wait with EINTR,
 * rather than running its handler there and leaving the call to wait on.
 * sr_sig_hold returns 1 if it held them, 0 if they were held already. */
int sr_sig_hold(void);
void sr_sig_release(void);
/* sr_held_sigmask puts the mask of the thread's waits into *m (the
 * kernel's 64 bits) and returns 1 when the thread holds its signals. */
int sr_held_sigmask(uint64_t *m);

/* sr_one_proc is 1 when the Go runtime runs on one processor (the process
 * may use one CPU: capi/main.go's setProcs). A program's thread that calls
 * the library in a loop then keeps that processor, and the runtime's
 * goroutines and timers wait for the monitor to take it (up to 10 ms): a
 * loop that finds nothing to do hands it over now and then (sr_idle_turn). */
extern int sr_one_proc;

/* sr_idle_turn is a loop's turn to give the processor away after *count
 * calls that found nothing to do (reset to 0 then): to the runtime's
 * goroutines (srgo_yield) when it runs on one processor and gocall (each of
 * those calls entered Go, so that the runtime's monitor never finds the
 * processor idle), else to the host's other threads (sched_yield). */
void sr_idle_turn_now(int gocall);
static inline void sr_idle_turn(unsigned int *count, unsigned int every, int gocall)
{
	if (++*count < every)
		return; /* inline: an empty ibv_poll_cq takes tens of ns */
	*count = 0;
	sr_idle_turn_now(gocall);
}

/* sr_idle_go is the same for the non-blocking calls that answer "nothing
 * yet" after entering Go (rpoll with no time to wait, EAGAIN from an
 * rsocket or a CM channel), which programs repeat in a loop: every
 * SR_IDLE_GO_EVERY of them on a thread gives the one processor to the
 * runtime's goroutines (stock rstream's rconnect, then rpoll(0) in a loop,
 * connected 10 ms later, when the runtime's monitor took the processor);
 * with more processors it does nothing. */
#define SR_IDLE_GO_EVERY 64
void sr_idle_go(void);

/* sr_slack_back_here gives the calling thread the timer slack of the
 * thread that loaded the library (misc.c: the runtime's monitor thread). */
void sr_slack_back_here(void);

static inline void sr_wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, uint32_t *done, uint32_t want)
{
	pthread_mutex_lock(mu);
	while (*done != want)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

/* How a QP was made: by the provider's create_qp_ex (VERBS_QP_EX in
 * rdma-core), and with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (the ibv_wr_* ops). */
#define SR_QP_EX 1
#define SR_QP_SEND_OPS 2
/* The ibv_wr_* operations the library serves. */
#define SR_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | \
		     IBV_QP_EX_WITH_SEND_WITH_INV)

/* sr_send_ops is what rxe's check_qp_init_attr lets a QP of type t ask
 * for: the library's RC set, UC's without READ and atomics, UD's SENDs
 * alone; none for other types. */
static inline uint64_t sr_send_ops(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return SR_SEND_OPS;
	case IBV_QPT_UC:
		return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
		       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
	case IBV_QPT_UD:
		return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	default:
		return 0;
	}
}

/* sr_qp_ex_setup gives a new QP (caps cap) what how asks for: the ibv_wr_*
 * ops and their batch, and the ibv_qp_ex view (verbs.c). ENOMEM or 0. */
int sr_qp_ex_setup(struct sr_qp *q, const struct ibv_qp_cap *cap, int how);
/* sr_wr_batch_free frees a QP's ibv_wr_* batch (NULL: nothing). */
void sr_wr_batch_free(struct sr_wr_batch *b);

/* sr_qp_attr_from_ex: the plain creation attributes inside extended ones. */
static inline void sr_qp_attr_from_ex(struct ibv_qp_init_attr *a, const struct ibv_qp_init_attr_ex *ax)
{
	memset(a, 0, sizeof(*a));
	a->qp_context = ax->qp_context;
	a->send_cq = ax->send_cq;
	a->recv_cq = ax->recv_cq;
	a->srq = ax->srq;
	a->cap = ax->cap;
	a->qp_type = ax->qp_type;
	a->sq_sig_all = ax->sq_sig_all;
}

/* The handles of the objects a work request names (the Go side reads them). */
static inline uintptr_t sr_mw_h(struct ibv_mw *mw) { return mw ? ((struct sr_mw *)mw)->h : 0; }
static inline uintptr_t sr_mr_h(struct ibv_mr *mr) { return mr ? ((struct sr_mr *)mr)->h : 0; }
static inline uintptr_t sr_ah_h(struct ibv_ah *ah) { return ah ? ((struct sr_ah *)ah)->h : 0; }

#endif
