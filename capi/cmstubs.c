//go:build linux && cgo && softroce_capi

// cmstubs.c: librdmacm's names softroce does not serve yet (the newer
// upstream nodes): each fails with ENOSYS and says so once on
// stderr, so that programs that import them
// load and run everything else. It includes no rdma_cma.h: the stubs take
// no arguments.

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define SR_EXPORT __attribute__((visibility("default")))

/* Each stub says so once, on its first call, naming itself: a program that
 * meets several hears of each. */
static void sr_cm_unsupported(const char *name, int *said)
{
	if (!__atomic_exchange_n(said, 1, __ATOMIC_SEQ_CST))
		fprintf(stderr, "softroce: %s: not implemented by softroce's librdmacm yet\n", name);
	errno = ENOSYS;
}

#define SR_CM_STUB(name) \
	SR_EXPORT int name(void) { static int said; sr_cm_unsupported(#name, &said); return -1; }

/* Newer upstream nodes (RDMACM_1.4, 1.5). */
SR_CM_STUB(rdma_query_addrinfo)
SR_CM_STUB(rdma_resolve_addrinfo)
SR_CM_STUB(rdma_write_cm_event)
SR_CM_STUB(repoll_create)
SR_CM_STUB(repoll_ctl)
SR_CM_STUB(repoll_wait)
