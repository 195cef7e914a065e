//go:build linux && cgo && softroce_capi

// verbs.c: libibverbs' public C API. The C here only lays out the structs a
// program reads and fills the function tables verbs.h's inline calls jump
// through; every call's logic is the Go verbs package, reached through the
// srgo_* exports (capi.go and friends).

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <sched.h>

#include "capi.h"
#include "_cgo_export.h"

/* verbs.h turns these names into macros; the library defines the functions. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

_Static_assert(sizeof(struct ibv_send_wr) == 128, "ibv_send_wr layout");
_Static_assert(offsetof(struct ibv_send_wr, wr) == 40, "ibv_send_wr.wr");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.mw) == 80, "ibv_send_wr.bind_mw");
_Static_assert(sizeof(struct ibv_wc) == 48, "ibv_wc layout");
_Static_assert(sizeof(struct ibv_recv_wr) == 32, "ibv_recv_wr layout");

#define SR_EXPORT __attribute__((visibility("default")))

static inline void *sr_ret_null(int err)
{
	errno = err;
	return NULL;
}

/* ---- devices ---- */

static pthread_mutex_t sr_dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sr_device *sr_devs[SR_MAX_DEVICES];
static int sr_ndevs;

static struct sr_device *sr_device_at(int i)
{
	struct sr_device *d = sr_devs[i];
	char name[64];
	uint64_t guid = 0;

	if (srgo_device_info(i, name, sizeof(name), &guid) != 0)
		return NULL;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return NULL;
		sr_devs[i] = d;
	}
	d->index = i;
	d->guid = guid;
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "%s", name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", name);
	return d;
}

SR_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int n, i, k = 0;

	if (sr_forked_child("ibv_get_device_list")) {
		if (num_devices)
			*num_devices = 0;
		return NULL;
	}
	pthread_mutex_lock(&sr_dev_mu);
	n = srgo_num_devices();
	if (n < 0) {
		pthread_mutex_unlock(&sr_dev_mu);
		if (num_devices)
			*num_devices = 0;
		errno = -n;
		return NULL;
	}
	if (n > SR_MAX_DEVICES)
		n = SR_MAX_DEVICES;
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		pthread_mutex_unlock(&sr_dev_mu);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		struct sr_device *d = sr_device_at(i);
		if (d)
			list[k++] = &d->dev;
	}
	if (n > sr_ndevs)
		sr_ndevs = n;
	pthread_mutex_unlock(&sr_dev_mu);
	if (num_devices)
		*num_devices = k;
	return list;
}

SR_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SR_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

SR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return device ? htobe64(((struct sr_device *)device)->guid) : 0;
}

SR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device ? ((struct sr_device *)device)->index : -1;
}

/* ---- the context and its function tables ---- */

static int sr_query_port_op(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
static int sr_query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
				 struct ibv_device_attr_ex *attr, size_t size);
static struct ibv_qp *sr_create_qp_ex_op(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
static struct ibv_cq_ex *sr_create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
static struct ibv_srq *sr_create_srq_ex_op(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
static int sr_poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int sr_req_notify_cq_op(struct ibv_cq *cq, int solicited_only);
static int sr_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int sr_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int sr_post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static struct ibv_mw *sr_alloc_mw_op(struct ibv_pd *pd, enum ibv_mw_type type);
static int sr_dealloc_mw_op(struct ibv_mw *mw);
static int sr_bind_mw_op(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
static int sr_compat_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
static int sr_compat_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr);

SR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sr_context *c;
	struct ibv_context *ctx;
	int err = 0;

	if (!device)
		return sr_ret_null(EINVAL);
	if (sr_forked_child("ibv_open_device"))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return sr_ret_null(ENOMEM);
	ctx = &c->vctx.context;
	ctx->device = device;
	ctx->abi_compat = (void *)UINTPTR_MAX; /* __VERBS_ABI_IS_EXTENDED */
	c->vctx.sz = sizeof(struct verbs_context);
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	ctx->cmd_fd = eventfd(0, EFD_CLOEXEC);
	if (ctx->async_fd < 0 || ctx->cmd_fd < 0) {
		err = errno;
		goto fail;
	}
	ctx->ops._compat_query_device = sr_compat_query_device;
	ctx->ops._compat_query_port = sr_compat_query_port;
	ctx->ops.alloc_mw = sr_alloc_mw_op;
	ctx->ops.bind_mw = sr_bind_mw_op;
	ctx->ops.dealloc_mw = sr_dealloc_mw_op;
	ctx->ops.poll_cq = sr_poll_cq_op;
	ctx->ops.req_notify_cq = sr_req_notify_cq_op;
	ctx->ops.post_srq_recv = sr_post_srq_recv_op;
	ctx->ops.post_send = sr_post_send_op;
	ctx->ops.post_recv = sr_post_recv_op;
	c->vctx.query_port = sr_query_port_op;
	c->vctx.query_device_ex = sr_query_device_ex_op;
	c->vctx.create_qp_ex = sr_create_qp_ex_op;
	c->vctx.create_cq_ex = sr_create_cq_ex_op;
	c->vctx.create_srq_ex = sr_create_srq_ex_op;
	c->h = srgo_open(((struct sr_device *)device)->index, ctx, ctx->async_fd, &err);
	if (!c->h)
		goto fail;
	ctx->num_comp_vectors = srgo_num_comp_vectors();
	sr_spare_ms();
	return ctx;
fail:
	if (ctx->async_fd >= 0)
		close(ctx->async_fd);
	if (ctx->cmd_fd >= 0)
		close(ctx->cmd_fd);
	free(c);
	return sr_ret_null(err ? err : ENODEV);
}

static inline struct sr_context *sr_ctx(struct ibv_context *ctx)
{
	return (struct sr_context *)((char *)ctx - offsetof(struct sr_context, vctx.context));
}

static inline uintptr_t sr_ctx_h(struct ibv_context *ctx)
{
	return ctx ? sr_ctx(ctx)->h : 0;
}

SR_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct sr_context *c;
	if (!ctx)
		return EINVAL;
	c = sr_ctx(ctx);
	srgo_close(c->h);
	close(ctx->async_fd);
	close(ctx->cmd_fd);
	free(c);
	return 0;
}

SR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	return sr_ret_null(EOPNOTSUPP);
}

/* ---- queries ---- */

SR_EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	return srgo_query_device(sr_ctx_h(ctx), attr);
}

static int sr_compat_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return ibv_query_device(ctx, attr);
}

static int sr_query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
				 struct ibv_device_attr_ex *attr, size_t size)
{
	struct ibv_device_attr_ex full;
	int err;

	if (in && in->comp_mask)
		return EINVAL;
	if (size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(&full, 0, sizeof(full));
	err = srgo_query_device(sr_ctx_h(ctx), &full.orig_attr);
	if (err)
		return err;
	full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
	full.max_dm_size = 0;
	if (size > sizeof(full))
		size = sizeof(full);
	memset(attr, 0, size);
	memcpy(attr, &full, size);
	return 0;
}

static int sr_query_port_op(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr full;
	int err;

	if (!ctx || !attr)
		return EINVAL;
	memset(&full, 0, sizeof(full));
	err = srgo_query_port(sr_ctx_h(ctx), port, &full);
	if (err)
		return err;
	if (len > sizeof(full))
		len = sizeof(full);
	memcpy(attr, &full, len);
	return 0;
}

/* The exported ibv_query_port takes the 48-byte compat struct. */
SR_EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	/* 48 bytes: struct ibv_port_attr without its last four (rdma-core: _compat_ibv_port_attr). */
	return sr_query_port_op(ctx, port, (struct ibv_port_attr *)attr, 48);
}

static int sr_compat_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

SR_EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (!ctx || !gid)
		return -1;
	if (srgo_query_gid(sr_ctx_h(ctx), port, index, gid) != 0) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

SR_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	if (!ctx || !entry || flags)
		return EINVAL;
	if (port != 1)
		return EINVAL;
	memset(&e, 0, sizeof(e));
	if (srgo_query_gid(sr_ctx_h(ctx), port, index, &e.gid) != 0)
		return EINVAL;
	if (memcmp(&e.gid, &(union ibv_gid){0}, sizeof(e.gid)) == 0)
		return ENODATA;
	e.gid_index = index;
	e.port_num = port;
	e.gid_type = IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = srgo_ifindex(sr_ctx_h(ctx));
	if (entry_size > sizeof(e))
		entry_size = sizeof(e);
	memcpy(entry, &e, entry_size);
	return 0;
}

SR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
				       size_t max_entries, uint32_t flags, size_t entry_size)
{
	size_t n = 0;
	uint32_t i;
	int len;

	if (!ctx || flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	len = srgo_gid_table_len(sr_ctx_h(ctx));
	for (i = 0; i < (uint32_t)len; i++) {
		struct ibv_gid_entry e;
		if (_ibv_query_gid_ex(ctx, 1, i, &e, 0, sizeof(e)) != 0)
			continue;
		if (n == max_entries)
			return -EINVAL;
		memcpy((char *)entries + n * entry_size, &e, sizeof(e));
		n++;
	}
	return n;
}

/* rdma-core's private ibv_query_gid_type: 0 RoCE v1 / IB, 1 RoCE v2. */
SR_EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, port, index, &gid))
		return -1;
	*type = 1;
	return 0;
}

SR_EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	uint16_t v;
	if (!ctx || !pkey)
		return -1;
	if (srgo_query_pkey(sr_ctx_h(ctx), port, index, &v) != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htons(v);
	return 0;
}

SR_EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	int i;
	for (i = 0; i < 64; i++) {
		__be16 v;
		if (ibv_query_pkey(ctx, port, i, &v))
			break;
		if (v == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}

/* ---- PD ---- */

SR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct sr_pd *p;
	int err = 0;
	if (!ctx)
		return sr_ret_null(EINVAL);
	if (sr_forked_child("ibv_alloc_pd"))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return sr_ret_null(ENOMEM);
	p->h = srgo_alloc_pd(sr_ctx_h(ctx), &err);
	if (!p->h) {
		free(p);
		return sr_ret_null(err);
	}
	p->pd.context = ctx;
	p->pd.handle = (uint32_t)p->h;
	return &p->pd;
}

SR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err;
	if (!pd)
		return EINVAL;
	err = srgo_dealloc_pd(((struct sr_pd *)pd)->h);
	if (err)
		return err;
	free(pd);
	return 0;
}

SR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx; (void)handle;
	return sr_ret_null(EOPNOTSUPP);
}

SR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

/* ---- MR ---- */

/* The access bits the kernel knows (ib_check_mr_access: up to
 * FLUSH_PERSISTENT, and the optional range it may ignore). */
#define SR_MR_ACCESS_KNOWN (((1u << 10) - 1) | (unsigned int)IBV_ACCESS_OPTIONAL_RANGE)

/* sr_mapped reports whether every page of [addr, addr+length) is mapped in
 * the process, as the kernel's pinning at registration finds out (EFAULT
 * otherwise): mincore(2) fails with ENOMEM on an unmapped page. It asks in
 * chunks with a fixed buffer, so a large range costs no allocation. */
static int sr_mapped(const void *addr, size_t length)
{
	unsigned char vec[1024];
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t p = (uintptr_t)addr & ~(uintptr_t)(page - 1);
	uintptr_t end = (uintptr_t)addr + length;

	while (p < end) {
		size_t n = (end - p + page - 1) / page;
		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)p, n * page, vec) != 0 && errno == ENOMEM)
			return 0;
		p += n * page;
	}
	return 1;
}

static struct ibv_mr *sr_reg(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access,
			     int fd, uint64_t offset)
{
	struct sr_mr *m;
	int err = 0;
	uint32_t lkey = 0, rkey = 0;

	if (sr_forked_child("ibv_reg_mr"))
		return NULL;
	if (!pd)
		return sr_ret_null(EINVAL);
	/* The kernel's checks at registration, in its order (uverbs reg_mr,
	 * ib_check_mr_access, ib_umem_get). A read-only mapping registered
	 * for writing is not detected (the kernel refuses it: EFAULT). */
	if (fd < 0 && (((uintptr_t)addr ^ iova) & (uint64_t)(sysconf(_SC_PAGESIZE) - 1)))
		return sr_ret_null(EINVAL);
	if (access & ~SR_MR_ACCESS_KNOWN)
		return sr_ret_null(EINVAL);
	if (access & IBV_ACCESS_ON_DEMAND)
		return sr_ret_null(EOPNOTSUPP);
	if (fd < 0) {
		if (!length || (uintptr_t)addr + length < (uintptr_t)addr)
			return sr_ret_null(EINVAL);
		if (!sr_mapped(addr, length))
			return sr_ret_null(EFAULT);
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return sr_ret_null(ENOMEM);
	m->h = srgo_reg_mr(((struct sr_pd *)pd)->h, addr, length, iova, access, fd, offset, &lkey, &rkey, &err);
	if (!m->h) {
		free(m);
		return sr_ret_null(err);
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = (uint32_t)m->h;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

SR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return sr_reg(pd, addr, length, (uintptr_t)addr, (unsigned int)access, -1, 0);
}

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return sr_reg(pd, addr, length, iova, (unsigned int)access, -1, 0);
}

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					  unsigned int access)
{
	return sr_reg(pd, addr, length, iova, access, -1, 0);
}

SR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
					   int fd, int access)
{
	if (fd < 0)
		return sr_ret_null(EINVAL);
	return sr_reg(pd, NULL, length, iova, (unsigned int)access, fd, offset);
}

SR_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	int err;
	uint32_t lkey = mr ? mr->lkey : 0, rkey = mr ? mr->rkey : 0;
	/* libibverbs' own input checks (v44 ibv_rereg_mr), errno EINVAL. */
	if (!mr || (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) || ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	err = srgo_rereg_mr(((struct sr_mr *)mr)->h, flags, (flags & IBV_REREG_MR_CHANGE_PD) ? ((struct sr_pd *)pd)->h : 0,
			    addr, length, access, &lkey, &rkey);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	mr->lkey = lkey;
	mr->rkey = rkey;
	return 0;
}

SR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err;
	if (!mr)
		return EINVAL;
	err = srgo_dereg_mr(((struct sr_mr *)mr)->h);
	if (err)
		return err;
	free(mr);
	return 0;
}

SR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	(void)pd; (void)handle;
	return sr_ret_null(EOPNOTSUPP);
}

SR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

SR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx; (void)handle;
	return sr_ret_null(EOPNOTSUPP);
}

SR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

/* ---- MW ---- */

static struct ibv_mw *sr_alloc_mw_op(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sr_mw *w;
	uint32_t rkey = 0;
	int err = 0;
	if (!pd)
		return sr_ret_null(EINVAL);
	w = calloc(1, sizeof(*w));
	if (!w)
		return sr_ret_null(ENOMEM);
	w->h = srgo_alloc_mw(((struct sr_pd *)pd)->h, type, &rkey, &err);
	if (!w->h) {
		free(w);
		return sr_ret_null(err);
	}
	w->mw.context = pd->context;
	w->mw.pd = pd;
	w->mw.rkey = rkey;
	w->mw.handle = (uint32_t)w->h;
	w->mw.type = type;
	return &w->mw;
}

static int sr_dealloc_mw_op(struct ibv_mw *mw)
{
	int err;
	if (!mw)
		return EINVAL;
	err = srgo_dealloc_mw(((struct sr_mw *)mw)->h);
	if (err)
		return err;
	free(mw);
	return 0;
}

static int sr_bind_mw_op(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	uint32_t rkey = 0;
	int err;
	if (!qp || !mw || !bind)
		return EINVAL;
	if (mw->type != IBV_MW_TYPE_1)
		return EINVAL;
	err = srgo_bind_mw(((struct sr_qp *)qp)->h, ((struct sr_mw *)mw)->h, bind, &rkey);
	if (err)
		return err;
	mw->rkey = rkey;
	return 0;
}

/* ---- completion channels and CQs ---- */

SR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct sr_comp_channel *c;
	int err = 0;
	if (!ctx)
		return sr_ret_null(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return sr_ret_null(ENOMEM);
	c->ch.context = ctx;
	c->ch.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		err = errno;
		free(c);
		return sr_ret_null(err);
	}
	c->ch.refcnt = 0;
	c->h = srgo_create_comp_channel(sr_ctx_h(ctx), c->ch.fd, &err);
	if (!c->h) {
		close(c->ch.fd);
		free(c);
		return sr_ret_null(err);
	}
	return &c->ch;
}

SR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct sr_comp_channel *c = (struct sr_comp_channel *)ch;
	int err;
	if (!ch)
		return EINVAL;
	err = srgo_destroy_comp_channel(c->h);
	if (err)
		return err;
	close(ch->fd);
	free(c);
	return 0;
}

static uintptr_t sr_ch_h(struct ibv_comp_channel *ch)
{
	return ch ? ((struct sr_comp_channel *)ch)->h : 0;
}

static struct sr_cq *sr_new_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch)
{
	struct sr_cq *c;
	int err = 0, actual = 0;

	if (!ctx)
		return sr_ret_null(EINVAL);
	if (sr_forked_child("ibv_create_cq"))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return sr_ret_null(ENOMEM);
	c->h = srgo_create_cq(sr_ctx_h(ctx), cqe, sr_ch_h(ch), (struct ibv_cq *)&c->cqx, &actual, &err);
	if (!c->h) {
		free(c);
		return sr_ret_null(err);
	}
	c->cqx.context = ctx;
	c->cqx.channel = ch;
	c->cqx.cq_context = cq_context;
	c->cqx.cqe = actual;
	c->cqx.handle = (uint32_t)c->h;
	pthread_mutex_init(&c->cqx.mutex, NULL);
	pthread_cond_init(&c->cqx.cond, NULL);
	if (ch)
		__atomic_add_fetch(&ch->refcnt, 1, __ATOMIC_SEQ_CST);
	return c;
}

SR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct sr_cq *c;
	if (ctx && (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors))
		return sr_ret_null(EINVAL);
	c = sr_new_cq(ctx, cqe, cq_context, channel);
	return c ? (struct ibv_cq *)&c->cqx : NULL;
}

SR_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int actual = 0, err;
	if (!cq)
		return EINVAL;
	err = srgo_resize_cq(((struct sr_cq *)cq)->h, cqe, &actual);
	if (err)
		return err;
	cq->cqe = actual;
	return 0;
}

SR_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct sr_cq *c = (struct sr_cq *)cq;
	uint32_t comp = 0, async = 0;
	int err;
	if (!cq)
		return EINVAL;
	err = srgo_destroy_cq(c->h, &comp, &async);
	if (err)
		return err;
	if (cq->channel)
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_SEQ_CST);
	/* As rdma-core: wait until every event reported has been acknowledged. */
	sr_wait_acked(&cq->mutex, &cq->cond, &cq->comp_events_completed, comp);
	sr_wait_acked(&cq->mutex, &cq->cond, &cq->async_events_completed, async);
	free(c);
	return 0;
}

/* Programs poll an empty CQ in a tight loop (perftest, UCX). When a QP
 * uses the CQ, an empty poll has the polling thread receive what the
 * device's link holds and handle it itself (srgo_poll_link), as a NIC would
 * have while the program spun: a reply reaches the CQ without a wake-up of
 * the device's receive goroutine. On a host with few cores the spinning
 * thread would still starve that goroutine and the timers: after a run of
 * empty polls it yields the CPU, and when the Go runtime has one processor
 * it hands that over (sr_idle_turn): its calls into Go keep it otherwise,
 * and an RC SEND retried after an RNR NAK waited 8-17 ms for its timer. */
#define SR_EMPTY_POLLS_YIELD 16
/* A thread that polls the link itself does the device's receive work: it
 * yields far less often. Every 16 empty polls (about 16 us of polling the
 * socket) gave the core away to other jobs for whole time slices on a
 * loaded host: ib_send_lat typical 26-57 us against 8-36 us every 1024 (median
 * 56 against 11, 5 alternations at load 11 on 2 cores). */
#define SR_EMPTY_POLLS_YIELD_RXPOLL 1024
static __thread unsigned int sr_empty_polls;

static int sr_poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct sr_cq *c = (struct sr_cq *)cq;
	int got = 0;
	if (n <= 0)
		return 0;
	/* An empty CQ answers without a call into Go. */
	int rxpoll = __atomic_load_n(&c->rxpoll, __ATOMIC_RELAXED);
	if (__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE) > 0)
		got = srgo_poll_cq(c->h, n, wc);
	else if (rxpoll && srgo_poll_link(c->h) > 0 && __atomic_load_n(&c->pending, __ATOMIC_ACQUIRE) > 0)
		got = srgo_poll_cq(c->h, n, wc);
	if (got == 0)
		sr_idle_turn(&sr_empty_polls, rxpoll ? SR_EMPTY_POLLS_YIELD_RXPOLL : SR_EMPTY_POLLS_YIELD, rxpoll);
	else
		sr_empty_polls = 0;
	return got;
}

static int sr_req_notify_cq_op(struct ibv_cq *cq, int solicited_only)
{
	/* rxe: the kernel arms a CQ without a channel too, and nothing comes
	 * of it; package verbs refuses that, so answer here. */
	if (!cq->channel)
		return 0;
	return srgo_req_notify_cq(((struct sr_cq *)cq)->h, solicited_only);
}

SR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	uint64_t v;
	struct ibv_cq *got = NULL;
	int fl;

	if (!channel)
		return -1;
	/* Nothing in a forked child handles the device: fail, do not block. */
	if (sr_forked_child("ibv_get_cq_event"))
		return -1;
	fl = fcntl(channel->fd, F_GETFL);
	for (;;) {
		ssize_t r;
		/* A blocking channel with no event yet: wait on the device's link
		 * too and handle what arrives on this thread (srgo_cc_wait); a
		 * signal, as in read below, only makes it look again. */
		if (fl >= 0 && !(fl & O_NONBLOCK)) {
			struct pollfd p = { .fd = channel->fd, .events = POLLIN };
			if (poll(&p, 1, 0) == 0 && srgo_cc_wait(sr_ch_h(channel)) != -1)
				continue;
		}
		r = read(channel->fd, &v, sizeof(v));
		if (r == sizeof(v))
			break;
		if (r < 0 && errno == EINTR)
			continue;
		return -1;
	}
	if (srgo_take_cq_event(sr_ch_h(channel), &got) != 0 || !got) {
		errno = EIO;
		return -1;
	}
	*cq = got;
	if (cq_context)
		*cq_context = got->cq_context;
	return 0;
}

SR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* The extended CQ: its polling ops read one completion at a time. */

static inline struct sr_cq *sr_cqx(struct ibv_cq_ex *cq)
{
	return (struct sr_cq *)cq;
}

static int sr_cqx_fill(struct ibv_cq_ex *cq)
{
	struct sr_cq *c = sr_cqx(cq);
	int n = srgo_poll_cq(c->h, 1, &c->cur);
	if (n == 0 && __atomic_load_n(&c->rxpoll, __ATOMIC_RELAXED) && srgo_poll_link(c->h) > 0)
		n = srgo_poll_cq(c->h, 1, &c->cur);
	if (n < 0)
		return EINVAL;
	if (n == 0) {
		/* Each of these polls entered Go (srgo_poll_cq). */
		sr_idle_turn(&sr_empty_polls, SR_EMPTY_POLLS_YIELD_RXPOLL, 1);
		return ENOENT;
	}
	sr_empty_polls = 0;
	cq->wr_id = c->cur.wr_id;
	cq->status = c->cur.status;
	return 0;
}

static int sr_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return sr_cqx_fill(cq);
}

static int sr_next_poll(struct ibv_cq_ex *cq) { return sr_cqx_fill(cq); }
static void sr_end_poll(struct ibv_cq_ex *cq) { (void)cq; }
static enum ibv_wc_opcode sr_read_opcode(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.opcode; }
static uint32_t sr_read_vendor_err(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.vendor_err; }
static uint32_t sr_read_byte_len(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.byte_len; }
static __be32 sr_read_imm_data(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.imm_data; }
static uint32_t sr_read_qp_num(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.qp_num; }
static uint32_t sr_read_src_qp(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.src_qp; }
static unsigned int sr_read_wc_flags(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.wc_flags; }
static uint32_t sr_read_slid(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.slid; }
static uint8_t sr_read_sl(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.sl; }
static uint8_t sr_read_dlid_path_bits(struct ibv_cq_ex *cq) { return sr_cqx(cq)->cur.dlid_path_bits; }

#define SR_CQ_WC_FLAGS_OK (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
			   IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | \
			   IBV_WC_EX_WITH_DLID_PATH_BITS)

static struct ibv_cq_ex *sr_create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct sr_cq *c;
	struct ibv_cq_ex *cq;

	if (!attr)
		return sr_ret_null(EINVAL);
	/* rxe's provider: these are the completion fields it can report. */
	if (attr->wc_flags & ~(uint64_t)SR_CQ_WC_FLAGS_OK)
		return sr_ret_null(EOPNOTSUPP);
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return sr_ret_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		return sr_ret_null(EOPNOTSUPP);
	if (attr->comp_vector >= (uint32_t)ctx->num_comp_vectors)
		return sr_ret_null(EINVAL);
	c = sr_new_cq(ctx, attr->cqe, attr->cq_context, attr->channel);
	if (!c)
		return NULL;
	cq = &c->cqx;
	cq->comp_mask = 0;
	cq->start_poll = sr_start_poll;
	cq->next_poll = sr_next_poll;
	cq->end_poll = sr_end_poll;
	cq->read_opcode = sr_read_opcode;
	cq->read_vendor_err = sr_read_vendor_err;
	cq->read_byte_len = sr_read_byte_len;
	cq->read_imm_data = sr_read_imm_data;
	cq->read_qp_num = sr_read_qp_num;
	cq->read_src_qp = sr_read_src_qp;
	cq->read_wc_flags = sr_read_wc_flags;
	cq->read_slid = sr_read_slid;
	cq->read_sl = sr_read_sl;
	cq->read_dlid_path_bits = sr_read_dlid_path_bits;
	return cq;
}

/* ---- SRQ ---- */

static struct ibv_srq *sr_new_srq(struct ibv_pd *pd, void *srq_context, struct ibv_srq_attr *attr)
{
	struct sr_srq *s;
	int err = 0;
	if (!pd || !attr)
		return sr_ret_null(EINVAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return sr_ret_null(ENOMEM);
	s->h = srgo_create_srq(((struct sr_pd *)pd)->h, attr, &s->srq, &err);
	if (!s->h) {
		free(s);
		return sr_ret_null(err);
	}
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = (uint32_t)s->h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

SR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return sr_ret_null(EINVAL);
	return sr_new_srq(pd, attr->srq_context, &attr->attr);
}

static struct ibv_srq *sr_create_srq_ex_op(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr)
{
	(void)ctx;
	if (!attr)
		return sr_ret_null(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD))
		return sr_ret_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return sr_ret_null(EOPNOTSUPP);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD))
		return sr_ret_null(EINVAL);
	return sr_new_srq(attr->pd, attr->srq_context, &attr->attr);
}

SR_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (!srq || !attr)
		return EINVAL;
	return srgo_modify_srq(((struct sr_srq *)srq)->h, attr, mask);
}

SR_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	return srgo_query_srq(((struct sr_srq *)srq)->h, attr);
}

SR_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	uint32_t async = 0;
	int err;
	if (!srq)
		return EINVAL;
	err = srgo_destroy_srq(((struct sr_srq *)srq)->h, &async);
	if (err)
		return err;
	sr_wait_acked(&srq->mutex, &srq->cond, &srq->events_completed, async);
	free(srq);
	return 0;
}

static int sr_post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int nbad = 0, err;
	/* bad_wr is required (rxe writes it unchecked on an error) and cleared
	 * first; an empty list posts nothing and succeeds, as rxe. */
	if (!bad)
		return EINVAL;
	*bad = NULL;
	if (!wr)
		return 0;
	err = srgo_post_srq_recv(((struct sr_srq *)srq)->h, wr, &nbad);
	if (err) {
		struct ibv_recv_wr *w = wr;
		while (nbad-- > 0 && w)
			w = w->next;
		*bad = w;
	}
	return err;
}

/* ---- QP ---- */

static void sr_qp_ex_init(struct sr_qp *q);
static struct sr_wr_batch *sr_wr_batch_new(const struct ibv_qp_cap *cap);


int sr_qp_ex_setup(struct sr_qp *q, const struct ibv_qp_cap *cap, int how)
{
	if (how & SR_QP_SEND_OPS) {
		q->batch = sr_wr_batch_new(cap);
		if (!q->batch)
			return ENOMEM;
		sr_qp_ex_init(q);
	}
	q->is_ex = (how & SR_QP_EX) != 0;
	q->qpx.comp_mask = 0;
	return 0;
}

static struct ibv_qp *sr_new_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, uint32_t create_flags, int how)
{
	struct sr_qp *q;
	struct ibv_qp *qp;
	int err = 0;
	uint32_t qpn = 0;

	if (sr_forked_child("ibv_create_qp"))
		return NULL;
	if (!pd || !attr)
		return sr_ret_null(EINVAL);
	q = calloc(1, sizeof(*q));
	if (!q)
		return sr_ret_null(ENOMEM);
	qp = &q->qpx.qp_base;
	q->h = srgo_create_qp(((struct sr_pd *)pd)->h, attr, create_flags,
			      attr->send_cq ? ((struct sr_cq *)attr->send_cq)->h : 0,
			      attr->recv_cq ? ((struct sr_cq *)attr->recv_cq)->h : 0,
			      attr->srq ? ((struct sr_srq *)attr->srq)->h : 0, qp, &qpn, &err);
	if (!q->h) {
		free(q);
		return sr_ret_null(err);
	}
	qp->context = pd->context;
	qp->qp_context = attr->qp_context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->handle = (uint32_t)q->h;
	qp->qp_num = qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = attr->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	pthread_mutex_init(&q->batch_mu, NULL);
	/* attr->cap now holds the created QP's caps (srgo_create_qp). */
	if (sr_qp_ex_setup(q, &attr->cap, how)) {
		uint32_t async = 0;
		srgo_destroy_qp(q->h, &async);
		free(q);
		return sr_ret_null(ENOMEM);
	}
	return qp;
}

SR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return sr_new_qp(pd, attr, 0, 0);
}


static struct ibv_qp *sr_create_qp_ex_op(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *ax)
{
	struct ibv_qp_init_attr a;
	uint64_t ops = 0;
	uint32_t flags = 0;
	int how = SR_QP_EX;
	(void)ctx;

	if (!ax)
		return sr_ret_null(EINVAL);
	if (ax->comp_mask &
	    ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS))
		return sr_ret_null(EOPNOTSUPP);
	if (!(ax->comp_mask & IBV_QP_INIT_ATTR_PD))
		return sr_ret_null(EINVAL);
	if (ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) {
		/* Only multicast loopback blocking (package verbs:
		 * QPCreateBlockSelfMcastLB); other flags as rxe answers them. */
		flags = ax->create_flags;
		if (flags & ~(uint32_t)IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)
			return sr_ret_null(EOPNOTSUPP);
	}
	if (ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = ax->send_ops_flags;
		if ((ops & ~sr_send_ops(ax->qp_type)) ||
		    (ax->qp_type != IBV_QPT_RC && ax->qp_type != IBV_QPT_UC && ax->qp_type != IBV_QPT_UD))
			return sr_ret_null(EOPNOTSUPP);
		/* As rxe's set_qp_send_ops: the mask bit alone installs the
		 * wr_start/complete/abort and setters, send_ops_flags 0 too. */
		how |= SR_QP_SEND_OPS;
	}
	sr_qp_attr_from_ex(&a, ax);
	{
		struct ibv_qp *qp = sr_new_qp(ax->pd, &a, flags, how);
		if (qp)
			ax->cap = a.cap;
		return qp;
	}
}

SR_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	int err;
	if (!qp || !attr)
		return EINVAL;
	err = srgo_modify_qp(((struct sr_qp *)qp)->h, attr, mask);
	if (err)
		return err;
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

SR_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	int err;
	if (!qp || !attr || !init)
		return EINVAL;
	memset(init, 0, sizeof(*init));
	err = srgo_query_qp(((struct sr_qp *)qp)->h, attr, mask, init);
	if (err)
		return err;
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->qp_type = qp->qp_type;
	qp->state = attr->qp_state;
	return 0;
}

SR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0;
}

SR_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct sr_qp *q = (struct sr_qp *)qp;
	uint32_t async = 0;
	int err;
	if (!qp)
		return EINVAL;
	err = srgo_destroy_qp(q->h, &async);
	if (err)
		return err;
	sr_wait_acked(&qp->mutex, &qp->cond, &qp->events_completed, async);
	sr_wr_batch_free(q->batch);
	free(q);
	return 0;
}

static int sr_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int nbad = 0, err;
	/* As rxe: bad_wr is required and cleared first; an empty list is EINVAL. */
	if (!bad)
		return EINVAL;
	*bad = NULL;
	if (!wr)
		return EINVAL;
	err = srgo_post_send(((struct sr_qp *)qp)->h, wr, &nbad);
	if (err) {
		struct ibv_send_wr *w = wr;
		while (nbad-- > 0 && w)
			w = w->next;
		*bad = w;
	}
	return err;
}

static int sr_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int nbad = 0, err;
	/* As rxe: bad_wr is required and cleared first; an empty list is EINVAL. */
	if (!bad)
		return EINVAL;
	*bad = NULL;
	if (!wr)
		return EINVAL;
	err = srgo_post_recv(((struct sr_qp *)qp)->h, wr, &nbad);
	if (err) {
		struct ibv_recv_wr *w = wr;
		while (nbad-- > 0 && w)
			w = w->next;
		*bad = w;
	}
	return err;
}

/* As rdma-core (VERBS_QP_EX): only a QP the provider's create_qp_ex made
 * has an ibv_qp_ex; ibv_create_qp's (and ibv_create_qp_ex's with only
 * IBV_QP_INIT_ATTR_PD, which verbs.h turns into ibv_create_qp) has none. */
SR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp || !((struct sr_qp *)qp)->is_ex)
		return NULL;
	return (struct ibv_qp_ex *)qp;
}

SR_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return srgo_mcast(((struct sr_qp *)qp)->h, (union ibv_gid *)gid, lid, 1);
}

SR_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return srgo_mcast(((struct sr_qp *)qp)->h, (union ibv_gid *)gid, lid, 0);
}

SR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

SR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* ---- the ibv_wr_* post API ---- */

static inline struct sr_qp *sr_q(struct ibv_qp_ex *qx) { return (struct sr_qp *)qx; }

/* The library's own bound on SGEs per work request (package verbs: MaxSGE). */
#define SR_WR_MAX_SGE 32
#define SR_WR_FIRST_SLOTS 16

static inline struct sr_wr_slot *sr_slot(struct sr_wr_batch *b, int i)
{
	return (struct sr_wr_slot *)(b->slots + (size_t)i * b->stride);
}

static inline struct ibv_sge *sr_slot_sge(struct sr_wr_slot *s)
{
	return (struct ibv_sge *)(s + 1);
}

static inline char *sr_slot_inl(struct sr_wr_batch *b, struct sr_wr_slot *s)
{
	return (char *)(sr_slot_sge(s) + b->max_sge);
}

/* sr_wr_batch_new sizes the slots for the QP's send caps. */
static struct sr_wr_batch *sr_wr_batch_new(const struct ibv_qp_cap *cap)
{
	struct sr_wr_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->max_wr = cap->max_send_wr;
	b->max_sge = cap->max_send_sge < 1 ? 1 : cap->max_send_sge > SR_WR_MAX_SGE ? SR_WR_MAX_SGE : cap->max_send_sge;
	b->max_inline = cap->max_inline_data;
	b->stride = (sizeof(struct sr_wr_slot) + b->max_sge * sizeof(struct ibv_sge) + b->max_inline + 7) & ~(size_t)7;
	return b;
}

void sr_wr_batch_free(struct sr_wr_batch *b)
{
	if (b)
		free(b->slots);
	free(b);
}

static struct ibv_send_wr *sr_wr_new(struct ibv_qp_ex *qx, enum ibv_wr_opcode op)
{
	struct sr_wr_batch *b = sr_q(qx)->batch;
	struct sr_wr_slot *s;
	if (b->err)
		return NULL;
	/* As rxe's check_qp_queue_full: one start/complete holds at most the
	 * send queue's depth. */
	if ((uint32_t)b->n >= b->max_wr) {
		b->err = ENOSPC;
		return NULL;
	}
	if (b->n == b->cap) {
		int cap = b->cap ? b->cap * 2 : SR_WR_FIRST_SLOTS;
		char *p;
		if ((uint32_t)cap > b->max_wr)
			cap = (int)b->max_wr;
		p = realloc(b->slots, (size_t)cap * b->stride);
		if (!p) {
			b->err = ENOMEM;
			return NULL;
		}
		b->slots = p;
		b->cap = cap;
	}
	s = sr_slot(b, b->n++);
	memset(&s->wr, 0, sizeof(s->wr));
	s->inl = -1;
	s->wr.wr_id = qx->wr_id;
	s->wr.send_flags = qx->wr_flags;
	s->wr.opcode = op;
	return &s->wr;
}

/* sr_wr_last is the slot the setters adjust: the last one built. */
static struct sr_wr_slot *sr_wr_last(struct ibv_qp_ex *qx)
{
	struct sr_wr_batch *b = sr_q(qx)->batch;
	if (b->err || b->n == 0)
		return NULL;
	return sr_slot(b, b->n - 1);
}

static struct ibv_send_wr *sr_wr_cur(struct ibv_qp_ex *qx)
{
	struct sr_wr_slot *s = sr_wr_last(qx);
	return s ? &s->wr : NULL;
}

static void sr_wr_start(struct ibv_qp_ex *qx)
{
	struct sr_qp *q = sr_q(qx);
	pthread_mutex_lock(&q->batch_mu);
	q->batch->n = 0;
	q->batch->err = 0;
}

static int sr_wr_complete(struct ibv_qp_ex *qx)
{
	struct sr_qp *q = sr_q(qx);
	struct sr_wr_batch *b = q->batch;
	int i, err = b->err, nbad = 0;
	/* As rxe: after a builder error nothing of the batch is posted. */
	if (!err && b->n > 0) {
		/* The slots stay put from here to the post: link them now. */
		for (i = 0; i < b->n; i++) {
			struct sr_wr_slot *s = sr_slot(b, i);
			struct ibv_sge *sge = sr_slot_sge(s);
			if (s->inl >= 0) {
				sge[0] = (struct ibv_sge){ .addr = (uintptr_t)sr_slot_inl(b, s), .length = (uint32_t)s->inl };
				s->wr.num_sge = 1;
			}
			s->wr.sg_list = s->wr.num_sge ? sge : NULL;
			s->wr.next = i + 1 < b->n ? &sr_slot(b, i + 1)->wr : NULL;
		}
		err = srgo_post_send(q->h, &sr_slot(b, 0)->wr, &nbad);
	}
	b->n = 0;
	b->err = 0;
	pthread_mutex_unlock(&q->batch_mu);
	return err;
}

static void sr_wr_abort(struct ibv_qp_ex *qx)
{
	struct sr_qp *q = sr_q(qx);
	q->batch->n = 0;
	q->batch->err = 0;
	pthread_mutex_unlock(&q->batch_mu);
}

static void sr_wr_rdma(struct ibv_qp_ex *qx, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *w = sr_wr_new(qx, op);
	if (!w)
		return;
	w->wr.rdma.rkey = rkey;
	w->wr.rdma.remote_addr = addr;
}

static void sr_wr_rdma_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr)
{
	sr_wr_rdma(qx, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void sr_wr_rdma_write_imm(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	sr_wr_rdma(qx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	if (sr_wr_cur(qx))
		sr_wr_cur(qx)->imm_data = imm;
}

static void sr_wr_rdma_read(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr)
{
	sr_wr_rdma(qx, IBV_WR_RDMA_READ, rkey, addr);
}

static void sr_wr_atomic_cmp_swp(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swap)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (!w)
		return;
	w->wr.atomic.rkey = rkey;
	w->wr.atomic.remote_addr = addr;
	w->wr.atomic.compare_add = cmp;
	w->wr.atomic.swap = swap;
}

static void sr_wr_atomic_fetch_add(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (!w)
		return;
	w->wr.atomic.rkey = rkey;
	w->wr.atomic.remote_addr = addr;
	w->wr.atomic.compare_add = add;
}

static void sr_wr_send(struct ibv_qp_ex *qx) { sr_wr_new(qx, IBV_WR_SEND); }

static void sr_wr_send_imm(struct ibv_qp_ex *qx, __be32 imm)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = imm;
}

static void sr_wr_send_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_SEND_WITH_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void sr_wr_local_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_LOCAL_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void sr_wr_bind_mw(struct ibv_qp_ex *qx, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *w = sr_wr_new(qx, IBV_WR_BIND_MW);
	if (!w)
		return;
	w->bind_mw.mw = mw;
	w->bind_mw.rkey = rkey;
	if (info)
		w->bind_mw.bind_info = *info;
}

static void sr_wr_send_tso(struct ibv_qp_ex *qx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr; (void)hdr_sz; (void)mss;
	sr_q(qx)->batch->err = EOPNOTSUPP;
}

static void sr_wr_set_ud_addr(struct ibv_qp_ex *qx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *w = sr_wr_cur(qx);
	if (!w)
		return;
	w->wr.ud.ah = ah;
	w->wr.ud.remote_qpn = qpn;
	w->wr.ud.remote_qkey = qkey;
}

static void sr_wr_set_xrc_srqn(struct ibv_qp_ex *qx, uint32_t srqn)
{
	(void)srqn;
	sr_q(qx)->batch->err = EOPNOTSUPP;
}

static void sr_wr_set_sge(struct ibv_qp_ex *qx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct sr_wr_slot *s = sr_wr_last(qx);
	if (!s)
		return;
	sr_slot_sge(s)[0] = (struct ibv_sge){ .addr = addr, .length = length, .lkey = lkey };
	s->wr.num_sge = 1;
	s->inl = -1;
}

static void sr_wr_set_sge_list(struct ibv_qp_ex *qx, size_t n, const struct ibv_sge *sgl)
{
	struct sr_wr_batch *b = sr_q(qx)->batch;
	struct sr_wr_slot *s = sr_wr_last(qx);
	if (!s)
		return;
	if (n > b->max_sge) {
		b->err = ENOSPC; /* as rxe: more than the QP's max_send_sge */
		return;
	}
	if (n && !sgl) {
		b->err = EINVAL;
		return;
	}
	/* Copied now, as rxe copies into the WQE: the program may reuse sgl. */
	if (n && srgo_copy_in(sr_slot_sge(s), (void *)sgl, n * sizeof(*sgl)) != 0) {
		b->err = EFAULT;
		return;
	}
	s->wr.num_sge = (int)n;
	s->inl = -1;
}

/* sr_wr_inline_add appends len bytes at addr to the last slot's inline
 * data (off bytes there already); it sets the batch error and returns -1
 * past the QP's max_inline_data (ENOSPC, as rxe) or on unmapped memory. */
static int sr_wr_inline_add(struct sr_wr_batch *b, struct sr_wr_slot *s, size_t off, const void *addr, size_t len)
{
	if (len > b->max_inline || off + len > b->max_inline) {
		b->err = ENOSPC;
		return -1;
	}
	if (len && srgo_copy_in(sr_slot_inl(b, s) + off, (void *)addr, len) != 0) {
		b->err = EFAULT;
		return -1;
	}
	return 0;
}

static void sr_wr_set_inline_data(struct ibv_qp_ex *qx, void *addr, size_t length)
{
	struct sr_wr_batch *b = sr_q(qx)->batch;
	struct sr_wr_slot *s = sr_wr_last(qx);
	if (!s)
		return;
	/* Copied now (ibv_wr_post(3): the buffer may be reused at once). */
	if (sr_wr_inline_add(b, s, 0, addr, length))
		return;
	s->inl = (int32_t)length;
	s->wr.send_flags |= IBV_SEND_INLINE;
}

static void sr_wr_set_inline_data_list(struct ibv_qp_ex *qx, size_t n, const struct ibv_data_buf *bufs)
{
	struct sr_wr_batch *b = sr_q(qx)->batch;
	struct sr_wr_slot *s = sr_wr_last(qx);
	size_t i, off = 0;
	if (!s)
		return;
	if (n && !bufs) {
		b->err = EINVAL;
		return;
	}
	for (i = 0; i < n; i++) {
		if (sr_wr_inline_add(b, s, off, bufs[i].addr, bufs[i].length))
			return;
		off += bufs[i].length;
	}
	s->inl = (int32_t)off;
	s->wr.send_flags |= IBV_SEND_INLINE;
}

static void sr_wr_atomic_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr, const void *val)
{
	(void)rkey; (void)addr; (void)val;
	sr_q(qx)->batch->err = EOPNOTSUPP;
}

static void sr_qp_ex_init(struct sr_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	x->wr_start = sr_wr_start;
	x->wr_complete = sr_wr_complete;
	x->wr_abort = sr_wr_abort;
	x->wr_rdma_write = sr_wr_rdma_write;
	x->wr_rdma_write_imm = sr_wr_rdma_write_imm;
	x->wr_rdma_read = sr_wr_rdma_read;
	x->wr_atomic_cmp_swp = sr_wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = sr_wr_atomic_fetch_add;
	x->wr_send = sr_wr_send;
	x->wr_send_imm = sr_wr_send_imm;
	x->wr_send_inv = sr_wr_send_inv;
	x->wr_send_tso = sr_wr_send_tso;
	x->wr_local_inv = sr_wr_local_inv;
	x->wr_bind_mw = sr_wr_bind_mw;
	x->wr_set_ud_addr = sr_wr_set_ud_addr;
	x->wr_set_xrc_srqn = sr_wr_set_xrc_srqn;
	x->wr_set_sge = sr_wr_set_sge;
	x->wr_set_sge_list = sr_wr_set_sge_list;
	x->wr_set_inline_data = sr_wr_set_inline_data;
	x->wr_set_inline_data_list = sr_wr_set_inline_data_list;
	x->wr_atomic_write = sr_wr_atomic_write;
}

/* ---- AH ---- */

SR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sr_ah *a;
	int err = 0;
	if (!pd || !attr)
		return sr_ret_null(EINVAL);
	a = calloc(1, sizeof(*a));
	if (!a)
		return sr_ret_null(ENOMEM);
	a->h = srgo_create_ah(((struct sr_pd *)pd)->h, attr, &err);
	if (!a->h) {
		free(a);
		return sr_ret_null(err);
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->ah.handle = (uint32_t)a->h;
	return &a->ah;
}

SR_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int err;
	if (!ah)
		return EINVAL;
	err = srgo_destroy_ah(((struct sr_ah *)ah)->h);
	if (err)
		return err;
	free(ah);
	return 0;
}

struct sr_grh {
	__be32 version_tclass_flow;
	__be16 paylen;
	uint8_t next_hdr;
	uint8_t hop_limit;
	union ibv_gid sgid;
	union ibv_gid dgid;
};

SR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah_attr)
{
	union ibv_gid sgid;
	int i, len;

	if (!ctx || !wc || !ah_attr)
		return EINVAL;
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port;
	if (grh)
		ah_attr->grh.flow_label = ntohl(grh->version_tclass_flow) & 0xfffff;
	/* As libibverbs: without a GRH the attributes are local (is_global 0). */
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	if (!grh) {
		errno = EINVAL;
		return -1;
	}
	{
		/* An IPv4 packet's GRH slot holds its 20-byte IP header at offset 20. */
		const uint8_t *raw = (const uint8_t *)grh;
		struct sr_grh g;
		memcpy(&g, grh, sizeof(g));
		ah_attr->is_global = 1;
		if ((raw[20] >> 4) == 4) {
			memset(&ah_attr->grh.dgid, 0, sizeof(ah_attr->grh.dgid));
			ah_attr->grh.dgid.raw[10] = 0xff;
			ah_attr->grh.dgid.raw[11] = 0xff;
			memcpy(&ah_attr->grh.dgid.raw[12], raw + 20 + 12, 4);
			memset(&g.dgid, 0, sizeof(g.dgid));
			g.dgid.raw[10] = 0xff;
			g.dgid.raw[11] = 0xff;
			memcpy(&g.dgid.raw[12], raw + 20 + 16, 4);
			ah_attr->grh.hop_limit = 0xff;
			ah_attr->grh.traffic_class = raw[21];
		} else {
			ah_attr->grh.dgid = g.sgid;
			ah_attr->grh.flow_label = ntohl(g.version_tclass_flow) & 0xfffff;
			ah_attr->grh.hop_limit = 0xff;
			ah_attr->grh.traffic_class = (ntohl(g.version_tclass_flow) >> 20) & 0xff;
		}
		len = srgo_gid_table_len(sr_ctx_h(ctx));
		for (i = 0; i < len; i++) {
			if (ibv_query_gid(ctx, port, i, &sgid) == 0 && memcmp(&sgid, &g.dgid, sizeof(sgid)) == 0) {
				ah_attr->grh.sgid_index = i;
				return 0;
			}
		}
		errno = ENOENT;
		return -1;
	}
}

SR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;
	if (!pd)
		return sr_ret_null(EINVAL);
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

SR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid)
{
	(void)ctx; (void)attr;
	memset(eth_mac, 0, 6);
	if (vid)
		*vid = 0xffff;
	return 0;
}

/* ---- async events ---- */

SR_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	uint64_t v;
	if (!ctx || !ev)
		return -1;
	for (;;) {
		ssize_t r = read(ctx->async_fd, &v, sizeof(v));
		if (r == sizeof(v))
			break;
		if (r < 0 && errno == EINTR)
			continue;
		return -1;
	}
	if (srgo_take_async_event(sr_ctx_h(ctx), ev) != 0) {
		errno = EIO;
		return -1;
	}
	return 0;
}

SR_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	pthread_mutex_t *mu = NULL;
	pthread_cond_t *cond = NULL;
	uint32_t *cnt = NULL;

	if (!ev)
		return;
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		if (ev->element.cq) {
			mu = &ev->element.cq->mutex;
			cond = &ev->element.cq->cond;
			cnt = &ev->element.cq->async_events_completed;
		}
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (ev->element.qp) {
			mu = &ev->element.qp->mutex;
			cond = &ev->element.qp->cond;
			cnt = &ev->element.qp->events_completed;
		}
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		if (ev->element.srq) {
			mu = &ev->element.srq->mutex;
			cond = &ev->element.srq->cond;
			cnt = &ev->element.srq->events_completed;
		}
		break;
	default:
		return;
	}
	if (!mu)
		return;
	pthread_mutex_lock(mu);
	(*cnt)++;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mu);
}

/* ---- fork ---- */

SR_EXPORT int ibv_fork_init(void) { return 0; }
SR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
SR_EXPORT int ibv_dontfork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
SR_EXPORT int ibv_dofork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
