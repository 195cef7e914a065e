//go:build linux && cgo && softroce_capi

// cmmcast.c: rdma_join_multicast, rdma_join_multicast_ex and
// rdma_leave_multicast over package cm (capi/cmmcast.go), with
// librdmacm's argument checks. As on the kernel's rdma_cm over RoCE the
// join completes at once with MULTICAST_JOIN (a synchronous ID waits for
// it); the ID's QP is attached on a full-member join and detached on
// leave. A group given as AF_IB (mckey -M) is its GID: an IPv4-mapped GID
// is the IPv4 group.

#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <infiniband/ib.h>

#include "capi.h"
#include "cm.h"
#include "_cgo_export.h"

#define SR_EXPORT __attribute__((visibility("default")))

static int sr_mc_err(int e)
{
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

/* sr_mc_addr checks a group address as librdmacm's ucma_addrlen does (a
 * known family) and gives the one package cm takes: AF_IB becomes the
 * sockaddr_in6 of its GID. */
static struct sockaddr *sr_mc_addr(struct sockaddr *addr, struct sockaddr_in6 *tmp)
{
	if (!addr)
		return NULL;
	switch (addr->sa_family) {
	case AF_INET:
	case AF_INET6:
		return addr;
	case AF_IB:
		memset(tmp, 0, sizeof(*tmp));
		tmp->sin6_family = AF_INET6;
		memcpy(&tmp->sin6_addr, &((struct sockaddr_ib *)addr)->sib_addr, sizeof(tmp->sin6_addr));
		return (struct sockaddr *)tmp;
	}
	return NULL;
}

static int sr_join(struct rdma_cm_id *id, struct sockaddr *addr, int flags, void *context)
{
	struct sockaddr_in6 tmp;
	struct sockaddr *a;
	if (!id)
		return sr_mc_err(EINVAL);
	a = sr_mc_addr(addr, &tmp);
	if (!a)
		return sr_mc_err(EINVAL);
	return sr_cm_sync_event(id, sr_mc_err(srgo_cm_join(((struct sr_cm_id *)id)->h, a, flags, context)));
}

SR_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return sr_join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

SR_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!attr)
		return sr_mc_err(EINVAL);
	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return sr_mc_err(ENOTSUP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return sr_mc_err(EINVAL);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) || attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return sr_mc_err(EINVAL);
	return sr_join(id, attr->addr, attr->join_flags, context);
}

SR_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct sockaddr_in6 tmp;
	struct sockaddr *a;
	if (!id)
		return sr_mc_err(EINVAL);
	a = sr_mc_addr(addr, &tmp);
	if (!a)
		return sr_mc_err(EINVAL);
	return sr_mc_err(srgo_cm_leave(((struct sr_cm_id *)id)->h, a));
}
