//go:build linux && cgo && softroce_capi

// rdmacm.c: librdmacm's exported names, so that programs linked against
// librdmacm.so.1 (perftest, rping, ...) load. The connection manager calls
// are not served yet: each fails with ENOSYS and says so once on stderr.
// rpoll and rselect on ordinary file descriptors behave as poll and select.

#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>

#define SR_EXPORT __attribute__((visibility("default")))

static void sr_cm_unsupported(const char *name)
{
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_SEQ_CST))
		fprintf(stderr, "softroce: %s: the rdma_cm half of the library is not implemented yet (use the TCP exchange, e.g. perftest without -R)\n", name);
	errno = ENOSYS;
}

#define SR_CM_STUB(name) \
	SR_EXPORT int name(void) { sr_cm_unsupported(#name); return -1; }
#define SR_CM_STUB_PTR(name) \
	SR_EXPORT void *name(void) { sr_cm_unsupported(#name); return NULL; }
#define SR_CM_STUB_VOID(name) \
	SR_EXPORT void name(void) { }

SR_CM_STUB(rdma_accept)
SR_CM_STUB(rdma_ack_cm_event)
SR_CM_STUB(rdma_bind_addr)
SR_CM_STUB(rdma_connect)
SR_CM_STUB(rdma_create_ep)
SR_CM_STUB_PTR(rdma_create_event_channel)
SR_CM_STUB(rdma_create_id)
SR_CM_STUB(rdma_create_qp)
SR_CM_STUB(rdma_create_qp_ex)
SR_CM_STUB(rdma_create_srq)
SR_CM_STUB(rdma_create_srq_ex)
SR_CM_STUB_VOID(rdma_destroy_ep)
SR_CM_STUB_VOID(rdma_destroy_event_channel)
SR_CM_STUB(rdma_destroy_id)
SR_CM_STUB_VOID(rdma_destroy_qp)
SR_CM_STUB_VOID(rdma_destroy_srq)
SR_CM_STUB(rdma_disconnect)
SR_CM_STUB_VOID(rdma_free_devices)
SR_CM_STUB_VOID(rdma_freeaddrinfo)
SR_CM_STUB(rdma_get_cm_event)
SR_CM_STUB_PTR(rdma_get_devices)
SR_CM_STUB(rdma_get_dst_port)
SR_CM_STUB(rdma_get_request)
SR_CM_STUB(rdma_get_src_port)
SR_CM_STUB(rdma_getaddrinfo)
SR_CM_STUB(rdma_join_multicast)
SR_CM_STUB(rdma_leave_multicast)
SR_CM_STUB(rdma_listen)
SR_CM_STUB(rdma_migrate_id)
SR_CM_STUB(rdma_notify)
SR_CM_STUB(rdma_reject)
SR_CM_STUB(rdma_resolve_addr)
SR_CM_STUB(rdma_resolve_route)
SR_CM_STUB(rdma_set_option)
SR_CM_STUB(rdma_join_multicast_ex)
SR_CM_STUB(rdma_establish)
SR_CM_STUB(rdma_init_qp_attr)
SR_CM_STUB(rdma_get_remote_ece)
SR_CM_STUB(rdma_reject_ece)
SR_CM_STUB(rdma_set_local_ece)

SR_CM_STUB(raccept)
SR_CM_STUB(rbind)
SR_CM_STUB(rclose)
SR_CM_STUB(rconnect)
SR_CM_STUB(rfcntl)
SR_CM_STUB(rgetpeername)
SR_CM_STUB(rgetsockname)
SR_CM_STUB(rgetsockopt)
SR_CM_STUB(riomap)
SR_CM_STUB(riounmap)
SR_CM_STUB(riowrite)
SR_CM_STUB(rlisten)
SR_CM_STUB(rread)
SR_CM_STUB(rreadv)
SR_CM_STUB(rrecv)
SR_CM_STUB(rrecvfrom)
SR_CM_STUB(rrecvmsg)
SR_CM_STUB(rsend)
SR_CM_STUB(rsendmsg)
SR_CM_STUB(rsendto)
SR_CM_STUB(rsetsockopt)
SR_CM_STUB(rshutdown)
SR_CM_STUB(rsocket)
SR_CM_STUB(rwrite)
SR_CM_STUB(rwritev)

SR_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

SR_EXPORT int rselect(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	return select(nfds, r, w, e, t);
}

SR_EXPORT const char *rdma_event_str(int event)
{
	static const char *const n[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if (event < 0 || event >= (int)(sizeof(n) / sizeof(n[0])))
		return "UNKNOWN EVENT";
	return n[event];
}
