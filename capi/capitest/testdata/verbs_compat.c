/* verbs_compat.c: answers the library must give as libibverbs with the rxe
 * provider gives them: the ibv_wr_* setters copy what they are handed (and
 * refuse more than the QP's caps), a batch as deep as the send queue,
 * ibv_qp_to_qp_ex, ibv_req_notify_cq without a channel, num_comp_vectors,
 * ibv_reg_mr's and ibv_rereg_mr's checks, the post calls' bad_wr, and
 * ibv_init_ah_from_wc without a GRH. Two RC QPs of one device talk to each
 * other. Prints "ok NAME" or "FAIL NAME: why"; exits with the number of
 * failures. Argument: the device's address (unused). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include "qpconn.h"

static int failures;
static struct ibv_context *ctx;
static union ibv_gid gid;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static char *sbuf, *rbuf;
static struct ibv_mr *smr, *rmr;
static struct ibv_qp *a, *b; /* a: made with send ops; b: plain, receives */
static struct ibv_qp_ex *ax;
static struct ibv_qp_cap acap;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)
#define LEN (1 << 16)
#define SLOT 256 /* bytes per receive buffer */

/* drain polls cq until n completions arrived (up to 5 s); how many did. */
static int drain(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0;
	for (int i = 0; got < n && i < 50000; i++) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return got;
		got += k;
		if (got < n && k == 0)
			usleep(100);
	}
	return got;
}

/* quiet reports whether cq stays empty for 100 ms. */
static int quiet(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 100; i++) {
		if (ibv_poll_cq(cq, 1, &wc))
			return 0;
		usleep(1000);
	}
	return 1;
}

/* post_recvs posts n receives on b, buffer i at rbuf + i*SLOT, wr_id i. */
static int post_recvs(int n)
{
	memset(rbuf, 0, (size_t)n * SLOT);
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)rbuf + i * SLOT, .length = SLOT, .lkey = rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(b, &wr, &bad))
			return -1;
	}
	return 0;
}

/* Four inline SENDs built from one buffer the program rewrites between
 * them arrive as four values (rxe copies in ibv_wr_set_inline_data); more
 * than the QP's max_inline_data fails the batch with ENOSPC. */
static void test_wr_inline_copy(void)
{
	const char *name = "wr_inline_copy";
	struct ibv_wc wc[8];
	uint32_t v;
	char *big;
	int i, r;

	if (post_recvs(4)) {
		FAIL(name, "post_recv: %s", strerror(errno));
		return;
	}
	ibv_wr_start(ax);
	for (i = 0; i < 4; i++) {
		v = 0xA0 + i;
		ax->wr_id = i;
		ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send(ax);
		ibv_wr_set_inline_data(ax, &v, sizeof(v));
	}
	v = 0xEE;
	if ((r = ibv_wr_complete(ax))) {
		FAIL(name, "wr_complete: %s", strerror(r));
		return;
	}
	if (drain(scq, 4, wc) != 4 || drain(rcq, 4, wc + 4) != 4) {
		FAIL(name, "completions missing");
		return;
	}
	for (i = 0; i < 8; i++)
		if (wc[i].status != IBV_WC_SUCCESS) {
			FAIL(name, "completion %d: %s", i, ibv_wc_status_str(wc[i].status));
			return;
		}
	for (i = 0; i < 4; i++) {
		uint32_t got;
		memcpy(&got, rbuf + i * SLOT, sizeof(got));
		if (got != 0xA0u + i) {
			FAIL(name, "message %d carried 0x%x, want 0x%x", i, got, 0xA0 + i);
			return;
		}
	}
	big = calloc(1, acap.max_inline_data + 1);
	ibv_wr_start(ax);
	ax->wr_id = 9;
	ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, big, acap.max_inline_data + 1);
	r = ibv_wr_complete(ax);
	free(big);
	if (r != ENOSPC) {
		FAIL(name, "inline of max_inline_data+1 (%u) bytes: %d, want ENOSPC", acap.max_inline_data + 1, r);
		return;
	}
	/* Inline data from unmapped memory fails the batch, not the process. */
	big = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(big, 4096);
	ibv_wr_start(ax);
	ax->wr_id = 10;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, big, 8);
	if ((r = ibv_wr_complete(ax)) != EFAULT) {
		FAIL(name, "inline data from unmapped memory: %d, want EFAULT", r);
		return;
	}
	if (!quiet(scq)) {
		FAIL(name, "a refused batch was posted");
		return;
	}
	OK(name);
}

/* Two SENDs whose SGE array the program rewrites between them carry their
 * own data (rxe copies the list); more SGEs than max_send_sge: ENOSPC. */
static void test_wr_sge_list_copy(void)
{
	const char *name = "wr_sge_list_copy";
	struct ibv_sge sl[SLOT / 8];
	struct ibv_wc wc[4];
	int i, r;

	for (i = 0; i < 4; i++)
		memset(sbuf + i * 64, 'a' + i, 64);
	if (post_recvs(2)) {
		FAIL(name, "post_recv: %s", strerror(errno));
		return;
	}
	ibv_wr_start(ax);
	for (i = 0; i < 2; i++) {
		sl[0] = (struct ibv_sge){ .addr = (uintptr_t)sbuf + i * 64, .length = 8, .lkey = smr->lkey };
		sl[1] = (struct ibv_sge){ .addr = (uintptr_t)sbuf + (i + 2) * 64, .length = 8, .lkey = smr->lkey };
		ax->wr_id = 20 + i;
		ax->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(ax);
		ibv_wr_set_sge_list(ax, 2, sl);
	}
	memset(sl, 0, sizeof(sl));
	if ((r = ibv_wr_complete(ax))) {
		FAIL(name, "wr_complete: %s", strerror(r));
		return;
	}
	if (drain(scq, 2, wc) != 2 || drain(rcq, 2, wc + 2) != 2) {
		FAIL(name, "completions missing");
		return;
	}
	for (i = 0; i < 2; i++) {
		char want[17];
		memset(want, 'a' + i, 8);
		memset(want + 8, 'c' + i, 8);
		want[16] = 0;
		if (wc[i].status != IBV_WC_SUCCESS || wc[2 + i].status != IBV_WC_SUCCESS ||
		    memcmp(rbuf + i * SLOT, want, 16)) {
			FAIL(name, "message %d: %.16s (%s), want %s", i, rbuf + i * SLOT,
			     ibv_wc_status_str(wc[2 + i].status), want);
			return;
		}
	}
	for (i = 0; i < (int)(sizeof(sl) / sizeof(sl[0])); i++)
		sl[i] = (struct ibv_sge){ .addr = (uintptr_t)sbuf, .length = 1, .lkey = smr->lkey };
	ibv_wr_start(ax);
	ax->wr_id = 29;
	ibv_wr_send(ax);
	ibv_wr_set_sge_list(ax, acap.max_send_sge + 1, sl);
	if ((r = ibv_wr_complete(ax)) != ENOSPC) {
		FAIL(name, "%u SGEs (max_send_sge %u): %d, want ENOSPC", acap.max_send_sge + 1, acap.max_send_sge, r);
		return;
	}
	if (!quiet(scq)) {
		FAIL(name, "the refused batch was posted");
		return;
	}
	OK(name);
}

/* 100 WRITEs in one start/complete on a 256-deep QP all complete; a
 * 200-byte inline list goes out whole; one WR more than max_send_wr fails
 * the batch with ENOSPC and posts none of it. */
static void test_wr_batch(void)
{
	const char *name = "wr_batch";
	static struct ibv_wc wc[300];
	struct ibv_data_buf db[2];
	char part[100];
	int i, r;

	ibv_wr_start(ax);
	for (i = 0; i < 100; i++) {
		ax->wr_id = 1000 + i;
		ax->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(ax, rmr->rkey, (uintptr_t)rbuf + 32768 + i * 8);
		ibv_wr_set_sge(ax, smr->lkey, (uintptr_t)sbuf, 8);
	}
	if ((r = ibv_wr_complete(ax))) {
		FAIL(name, "100 WRs: %s", strerror(r));
		return;
	}
	if ((r = drain(scq, 100, wc)) != 100) {
		FAIL(name, "%d of 100 completions", r);
		return;
	}
	for (i = 0; i < 100; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)(1000 + i)) {
			FAIL(name, "completion %d: %s wr_id %llu", i, ibv_wc_status_str(wc[i].status),
			     (unsigned long long)wc[i].wr_id);
			return;
		}
	if (post_recvs(1)) {
		FAIL(name, "post_recv: %s", strerror(errno));
		return;
	}
	memset(part, 'x', sizeof(part));
	db[0] = (struct ibv_data_buf){ .addr = part, .length = sizeof(part) };
	db[1] = (struct ibv_data_buf){ .addr = part, .length = sizeof(part) };
	ibv_wr_start(ax);
	ax->wr_id = 1200;
	ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data_list(ax, 2, db);
	if ((r = ibv_wr_complete(ax))) {
		FAIL(name, "200-byte inline list: %s", strerror(r));
		return;
	}
	if (drain(scq, 1, wc) != 1 || drain(rcq, 1, wc + 1) != 1 || wc[1].status != IBV_WC_SUCCESS ||
	    wc[1].byte_len != 200) {
		FAIL(name, "200-byte inline list: received %u bytes", wc[1].byte_len);
		return;
	}
	ibv_wr_start(ax);
	for (i = 0; i <= (int)acap.max_send_wr; i++) {
		ax->wr_id = 2000 + i;
		ax->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(ax, rmr->rkey, (uintptr_t)rbuf + 32768);
		ibv_wr_set_sge(ax, smr->lkey, (uintptr_t)sbuf, 8);
	}
	if ((r = ibv_wr_complete(ax)) != ENOSPC) {
		FAIL(name, "max_send_wr+1 (%u) WRs: %d, want ENOSPC", acap.max_send_wr + 1, r);
		return;
	}
	if (!quiet(scq)) {
		FAIL(name, "the refused batch was posted");
		return;
	}
	OK(name);
}

/* ibv_qp_to_qp_ex: NULL for ibv_create_qp's QP (and ibv_create_qp_ex's
 * with only the PD, which verbs.h sends to ibv_create_qp); the QP for the
 * provider's create_qp_ex; IBV_QP_INIT_ATTR_SEND_OPS_FLAGS installs the
 * ibv_wr_* frame with send_ops_flags 0 too. */
static void test_qp_to_qp_ex(void)
{
	const char *name = "qp_to_qp_ex";
	struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_init_attr_ex ix;
	struct ibv_qp *q1, *q2, *q3, *q4;
	struct ibv_qp_ex *x;
	int r;

	q1 = ibv_create_qp(pd, &ia);
	memset(&ix, 0, sizeof(ix));
	ix.send_cq = ix.recv_cq = scq;
	ix.qp_type = IBV_QPT_RC;
	ix.cap = ia.cap;
	ix.pd = pd;
	ix.comp_mask = IBV_QP_INIT_ATTR_PD;
	q2 = ibv_create_qp_ex(ctx, &ix);
	ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ix.send_ops_flags = 0;
	q3 = ibv_create_qp_ex(ctx, &ix);
	ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ix.create_flags = 0;
	q4 = ibv_create_qp_ex(ctx, &ix);
	if (!q1 || !q2 || !q3 || !q4) {
		FAIL(name, "create: %s", strerror(errno));
		return;
	}
	if (ibv_qp_to_qp_ex(q1) || ibv_qp_to_qp_ex(q2)) {
		FAIL(name, "ibv_create_qp's QP has an ibv_qp_ex (%p, %p), want NULL", (void *)ibv_qp_to_qp_ex(q1),
		     (void *)ibv_qp_to_qp_ex(q2));
		return;
	}
	x = ibv_qp_to_qp_ex(q3);
	if (!x || (void *)x != (void *)q3 || !x->wr_start || !x->wr_complete || !x->wr_abort || !x->wr_set_sge ||
	    !x->wr_set_sge_list || !x->wr_set_inline_data || !x->wr_set_inline_data_list || !x->wr_set_ud_addr) {
		FAIL(name, "send_ops_flags 0: qp_ex %p, wr_start %p", (void *)x, x ? (void *)x->wr_start : NULL);
		return;
	}
	ibv_wr_start(x);
	if ((r = ibv_wr_complete(x))) {
		FAIL(name, "empty batch: %s", strerror(r));
		return;
	}
	if (!ibv_qp_to_qp_ex(q4)) {
		FAIL(name, "create_qp_ex with create_flags: no ibv_qp_ex");
		return;
	}
	ibv_destroy_qp(q1);
	ibv_destroy_qp(q2);
	ibv_destroy_qp(q3);
	ibv_destroy_qp(q4);
	OK(name);
}

/* Arming a CQ without a completion channel: 0, as with rxe. */
/* send_ops_per_type: the ibv_wr_* operations a QP may ask for depend on
 * its type, as rxe's check_qp_init_attr: a UD QP only SENDs. */
static void test_send_ops_per_type(void)
{
	const char *name = "send_ops_per_type";
	struct ibv_qp_init_attr_ex ix;
	struct ibv_qp *q;

	memset(&ix, 0, sizeof(ix));
	ix.send_cq = ix.recv_cq = scq;
	ix.qp_type = IBV_QPT_UD;
	ix.cap.max_send_wr = ix.cap.max_recv_wr = 4;
	ix.cap.max_send_sge = ix.cap.max_recv_sge = 1;
	ix.pd = pd;
	ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ix.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	q = ibv_create_qp_ex(ctx, &ix);
	if (q || errno != EOPNOTSUPP) {
		FAIL(name, "UD with RDMA_WRITE: %p, errno %d, want NULL and EOPNOTSUPP", (void *)q, errno);
		if (q)
			ibv_destroy_qp(q);
		return;
	}
	ix.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	q = ibv_create_qp_ex(ctx, &ix);
	if (!q) {
		FAIL(name, "UD with SEND and SEND_WITH_IMM: %s", strerror(errno));
		return;
	}
	ibv_destroy_qp(q);
	OK(name);
}

static void test_req_notify_nochannel(void)
{
	const char *name = "req_notify_nochannel";
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	int r;
	if (!cq) {
		FAIL(name, "create_cq: %s", strerror(errno));
		return;
	}
	if ((r = ibv_req_notify_cq(cq, 0)) || (r = ibv_req_notify_cq(cq, 1)))
		FAIL(name, "req_notify_cq: %d, want 0", r);
	else
		OK(name);
	ibv_destroy_cq(cq);
}

/* possible_cpus counts /sys/devices/system/cpu/possible ("0-3,8"). */
static int possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	char line[4096], *p, *tok;
	int n = 0;
	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return 0;
	}
	fclose(f);
	for (tok = strtok_r(line, ",\n", &p); tok; tok = strtok_r(NULL, ",\n", &p)) {
		int lo, hi;
		if (sscanf(tok, "%d-%d", &lo, &hi) == 2)
			n += hi - lo + 1;
		else
			n++;
	}
	return n;
}

/* num_comp_vectors is the number of possible CPUs (rxe); every vector below
 * it makes a CQ, the next one is EINVAL. */
static void test_comp_vectors(void)
{
	const char *name = "comp_vectors";
	int want = possible_cpus(), n = ctx->num_comp_vectors;
	struct ibv_cq *cq;
	struct ibv_cq_init_attr_ex ca = { .cqe = 4 };
	struct ibv_cq_ex *cx;

	if (want > 0 && n != want) {
		FAIL(name, "num_comp_vectors %d, want %d (possible CPUs)", n, want);
		return;
	}
	if (n < 1) {
		FAIL(name, "num_comp_vectors %d", n);
		return;
	}
	cq = ibv_create_cq(ctx, 4, NULL, NULL, n - 1);
	if (!cq) {
		FAIL(name, "comp_vector %d: %s", n - 1, strerror(errno));
		return;
	}
	ibv_destroy_cq(cq);
	ca.comp_vector = n - 1;
	cx = ibv_create_cq_ex(ctx, &ca);
	if (!cx) {
		FAIL(name, "create_cq_ex comp_vector %d: %s", n - 1, strerror(errno));
		return;
	}
	ibv_destroy_cq(ibv_cq_ex_to_cq(cx));
	errno = 0;
	cq = ibv_create_cq(ctx, 4, NULL, NULL, n);
	if (cq || errno != EINVAL) {
		FAIL(name, "comp_vector %d (= num_comp_vectors): %p errno %d, want EINVAL", n, (void *)cq, errno);
		return;
	}
	OK(name);
}

/* reg_one registers and answers errno (0 when it worked). */
static int reg_one(void *addr, size_t len, uint64_t iova, int access)
{
	struct ibv_mr *m;
	errno = 0;
	m = ibv_reg_mr_iova(pd, addr, len, iova, access);
	if (!m)
		return errno ? errno : -1;
	ibv_dereg_mr(m);
	return 0;
}

/* ibv_reg_mr refuses what the kernel refuses at registration: length 0,
 * unknown access bits, an iova at another page offset than addr (EINVAL),
 * memory not mapped (EFAULT). */
static void test_reg_mr_checks(void)
{
	const char *name = "reg_mr_checks";
	long pg = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int e;

	if (p == MAP_FAILED) {
		FAIL(name, "mmap: %s", strerror(errno));
		return;
	}
	if ((e = reg_one(p, 3 * pg, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE))) {
		FAIL(name, "a mapped range: %s", strerror(e));
		return;
	}
	if ((e = reg_one(p + 16, 64, 0x100000 + 16, IBV_ACCESS_LOCAL_WRITE))) {
		FAIL(name, "iova at the same page offset: %s", strerror(e));
		return;
	}
	munmap(p + pg, pg);
	if ((e = reg_one(p, 0, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE)) != EINVAL)
		FAIL(name, "length 0: %d, want EINVAL", e);
	else if ((e = reg_one(p, 64, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE | (1 << 30))) != EINVAL)
		FAIL(name, "access bit 30: %d, want EINVAL", e);
	else if ((e = reg_one(p + 16, 64, 0x100000, IBV_ACCESS_LOCAL_WRITE)) != EINVAL)
		FAIL(name, "iova page offset 0 for addr offset 16: %d, want EINVAL", e);
	else if ((e = reg_one(p + pg, pg, (uintptr_t)p + pg, IBV_ACCESS_LOCAL_WRITE)) != EFAULT)
		FAIL(name, "an unmapped page: %d, want EFAULT", e);
	else if ((e = reg_one(p, 3 * pg, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE)) != EFAULT)
		FAIL(name, "a range with a hole: %d, want EFAULT", e);
	else
		OK(name);
	munmap(p, 3 * pg);
}

/* ibv_rereg_mr's own input checks: IBV_REREG_MR_ERR_INPUT, errno EINVAL. */
static void test_rereg_input(void)
{
	const char *name = "rereg_input";
	struct ibv_mr *m = ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	int r;

	if (!m) {
		FAIL(name, "reg_mr: %s", strerror(errno));
		return;
	}
	errno = 0;
	r = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	if (r != IBV_REREG_MR_ERR_INPUT || errno != EINVAL) {
		FAIL(name, "access without CHANGE_ACCESS: %d errno %d", r, errno);
		return;
	}
	errno = 0;
	r = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, sbuf, 0, 0);
	if (r != IBV_REREG_MR_ERR_INPUT || errno != EINVAL) {
		FAIL(name, "CHANGE_TRANSLATION, length 0: %d errno %d", r, errno);
		return;
	}
	errno = 0;
	r = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 4096, 0);
	if (r != IBV_REREG_MR_ERR_INPUT || errno != EINVAL) {
		FAIL(name, "CHANGE_TRANSLATION, addr NULL: %d errno %d", r, errno);
		return;
	}
	if ((r = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ))) {
		FAIL(name, "CHANGE_ACCESS: %d errno %d", r, errno);
		return;
	}
	ibv_dereg_mr(m);
	OK(name);
}

/* The post calls as rxe: a NULL bad_wr is EINVAL, *bad_wr is cleared on
 * entry, an empty list is EINVAL (an SRQ's: nothing posted, 0). */
static void test_post_bad_wr(void)
{
	const char *name = "post_bad_wr";
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 8, .lkey = smr->lkey };
	struct ibv_send_wr sw = { .wr_id = 3000, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	struct ibv_recv_wr rw = { .wr_id = 3001, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;
	int r;

	sw.wr.rdma.rkey = rmr->rkey;
	sw.wr.rdma.remote_addr = (uintptr_t)rbuf + 32768;
	if (!srq) {
		FAIL(name, "create_srq: %s", strerror(errno));
		return;
	}
	if ((r = ibv_post_send(a, &sw, NULL)) != EINVAL || (r = ibv_post_recv(b, &rw, NULL)) != EINVAL ||
	    (r = ibv_post_srq_recv(srq, &rw, NULL)) != EINVAL) {
		FAIL(name, "NULL bad_wr: %d, want EINVAL", r);
		return;
	}
	sbad = (void *)&sw;
	if ((r = ibv_post_send(a, NULL, &sbad)) != EINVAL || sbad) {
		FAIL(name, "post_send of no WR: %d bad %p, want EINVAL and NULL", r, (void *)sbad);
		return;
	}
	rbad = (void *)&rw;
	if ((r = ibv_post_recv(b, NULL, &rbad)) != EINVAL || rbad) {
		FAIL(name, "post_recv of no WR: %d bad %p, want EINVAL and NULL", r, (void *)rbad);
		return;
	}
	rbad = (void *)&rw;
	if ((r = ibv_post_srq_recv(srq, NULL, &rbad)) != 0 || rbad) {
		FAIL(name, "post_srq_recv of no WR: %d bad %p, want 0 and NULL", r, (void *)rbad);
		return;
	}
	sbad = (void *)&sw;
	if ((r = ibv_post_send(a, &sw, &sbad)) || sbad) {
		FAIL(name, "post_send: %d bad %p, want 0 and NULL", r, (void *)sbad);
		return;
	}
	if (!drain(scq, 1, &wc) || wc.status != IBV_WC_SUCCESS) {
		FAIL(name, "post_send's completion missing");
		return;
	}
	rbad = (void *)&rw;
	if ((r = ibv_post_srq_recv(srq, &rw, &rbad)) || rbad) {
		FAIL(name, "post_srq_recv: %d bad %p, want 0 and NULL", r, (void *)rbad);
		return;
	}
	ibv_destroy_srq(srq);
	OK(name);
}

/* ibv_init_ah_from_wc of a completion without a GRH: 0, a local address
 * (is_global 0), the completion's fields (libibverbs). */
static void test_init_ah_no_grh(void)
{
	const char *name = "init_ah_no_grh";
	struct ibv_wc wc = { .slid = 7, .sl = 2, .dlid_path_bits = 1, .wc_flags = 0 };
	struct ibv_grh grh;
	struct ibv_ah_attr ah;
	int r;

	memset(&ah, 0xff, sizeof(ah));
	errno = 0;
	if ((r = ibv_init_ah_from_wc(ctx, 1, &wc, NULL, &ah)) || ah.is_global || ah.dlid != 7 || ah.sl != 2 ||
	    ah.src_path_bits != 1 || ah.port_num != 1) {
		FAIL(name, "no GRH: %d errno %d is_global %d dlid %u sl %u port %u", r, errno, ah.is_global, ah.dlid,
		     ah.sl, ah.port_num);
		return;
	}
	memset(&grh, 0, sizeof(grh));
	grh.version_tclass_flow = htobe32(0x60000000 | 0x12345);
	if ((r = ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &ah)) || ah.is_global || ah.grh.flow_label != 0x12345) {
		FAIL(name, "GRH buffer without IBV_WC_GRH: %d is_global %d flow_label 0x%x", r, ah.is_global,
		     ah.grh.flow_label);
		return;
	}
	OK(name);
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr_ex ix;
	struct ibv_qp_init_attr ia;

	list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])) || ibv_query_gid(ctx, 1, 1, &gid)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	scq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
	sbuf = calloc(1, LEN);
	rbuf = calloc(1, LEN);
	if (!pd || !scq || !rcq) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	smr = ibv_reg_mr(pd, sbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(pd, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(&ix, 0, sizeof(ix));
	ix.send_cq = scq;
	ix.recv_cq = scq;
	ix.qp_type = IBV_QPT_RC;
	ix.cap = (struct ibv_qp_cap){ .max_send_wr = 256, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 1,
				      .max_inline_data = 64 };
	ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ix.pd = pd;
	ix.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	a = ibv_create_qp_ex(ctx, &ix);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = rcq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap = (struct ibv_qp_cap){ .max_send_wr = 16, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 };
	b = ibv_create_qp(pd, &ia);
	if (!smr || !rmr || !a || !b || !(ax = ibv_qp_to_qp_ex(a)) ||
	    qp_init(a, 0) || qp_init(b, IBV_ACCESS_REMOTE_WRITE) || qp_rtr_rts(a, b->qp_num, &gid) ||
	    qp_rtr_rts(b, a->qp_num, &gid)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	acap = ix.cap;
	if (acap.max_send_wr != 256 || acap.max_send_sge != 2 || acap.max_inline_data < 64) {
		printf("FAIL setup: caps %u/%u/%u\n", acap.max_send_wr, acap.max_send_sge, acap.max_inline_data);
		return 1;
	}
	test_wr_inline_copy();
	test_wr_sge_list_copy();
	test_wr_batch();
	test_qp_to_qp_ex();
	test_send_ops_per_type();
	test_req_notify_nochannel();
	test_comp_vectors();
	test_reg_mr_checks();
	test_rereg_input();
	test_post_bad_wr();
	test_init_ah_no_grh();
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return failures;
}
