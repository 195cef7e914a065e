/* mcast.c: UD multicast through the verbs API (ibv_attach_mcast,
 * ibv_detach_mcast) and rdma_cm's multicast calls' error paths, on one
 * device: a UD QP sends to a group (QPN 0xFFFFFF) and every QP attached
 * to it receives, over the UDP link's own group membership (multicast
 * loop), except from a QP made with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
 * Prints "ok NAME" or "FAIL NAME: why"; exits with the number of
 * failures. Argument: the device's address. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "qpconn.h"

static int failures;

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

#define QKEY 0x11111111
#define SLOT 256

static struct ibv_pd *pd;
static char *buf;
static struct ibv_mr *mr;

struct q {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	int slot;
};

/* new_ud_flags makes a UD QP in RTS, with ibv_create_qp_ex's create_flags
 * when flags is not 0. */
static int new_ud_flags(struct q *q, int slot, uint32_t flags)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UD, .cap = { .max_send_wr = 8, .max_recv_wr = 8,
								     .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	q->slot = slot;
	q->cq = ibv_create_cq(pd->context, 16, NULL, NULL, 0);
	if (!q->cq)
		return -1;
	ia.send_cq = ia.recv_cq = q->cq;
	if (flags) {
		struct ibv_qp_init_attr_ex ax = { .qp_type = IBV_QPT_UD, .send_cq = q->cq, .recv_cq = q->cq, .cap = ia.cap,
						  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
						  .pd = pd, .create_flags = flags };
		q->qp = ibv_create_qp_ex(pd->context, &ax);
	} else {
		q->qp = ibv_create_qp(pd, &ia);
	}
	if (!q->qp || ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	at.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE))
		return -1;
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 1;
	return ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int new_ud(struct q *q, int slot)
{
	return new_ud_flags(q, slot, 0);
}

static int post_recv(struct q *q)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + q->slot * SLOT, .length = SLOT, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = q->slot, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(q->qp, &wr, &bad);
}

/* got reports whether q received msg (behind the 40-byte GRH) within 2 s. */
static int got(struct q *q, const char *msg)
{
	struct ibv_wc wc;
	for (int i = 0; i < 20000; i++) {
		if (ibv_poll_cq(q->cq, 1, &wc)) {
			return wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + strlen(msg) &&
			       !memcmp(buf + q->slot * SLOT + 40, msg, strlen(msg));
		}
		usleep(100);
	}
	return 0;
}

/* nothing reports whether q's CQ stays empty for 100 ms. */
static int nothing(struct q *q)
{
	struct ibv_wc wc;
	usleep(100000);
	return ibv_poll_cq(q->cq, 1, &wc) == 0;
}

static int send_to(struct q *s, struct ibv_ah *ah, const char *msg)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + s->slot * SLOT, .length = strlen(msg), .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	memcpy(buf + s->slot * SLOT, msg, strlen(msg));
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xFFFFFF;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(s->qp, &wr, &bad) || !wait_wc(s->cq, &wc))
		return -1;
	return wc.status;
}

static void gid_of(union ibv_gid *g, const char *ip4)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	inet_pton(AF_INET, ip4, &g->raw[12]);
}

static void test_attach(struct ibv_context *ctx)
{
	const char *name = "attach";
	struct q s, a, b, other;
	union ibv_gid group, group2, unicast;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	struct ibv_ah *ah;

	if (new_ud(&s, 0) || new_ud(&a, 1) || new_ud(&b, 2) || new_ud(&other, 3)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
	gid_of(&group, "239.60.200.1");
	gid_of(&group2, "239.60.200.2");
	gid_of(&unicast, "10.60.200.1");
	if (ibv_attach_mcast(a.qp, &group, 0) || ibv_attach_mcast(b.qp, &group, 0) ||
	    ibv_attach_mcast(other.qp, &group2, 0)) {
		FAIL(name, "ibv_attach_mcast: %s", strerror(errno));
		return;
	}
	aa.grh.dgid = group;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(pd, &aa);
	if (!ah || post_recv(&a) || post_recv(&b) || post_recv(&other)) {
		FAIL(name, "AH or receives: %s", strerror(errno));
		return;
	}
	if (send_to(&s, ah, "to the group"))
		FAIL(name, "send to the group failed");
	else if (!got(&a, "to the group") || !got(&b, "to the group"))
		FAIL(name, "an attached QP did not receive the message");
	else if (!nothing(&other))
		FAIL(name, "a QP of another group received it");
	else
		OK(name);

	name = "detach";
	if (ibv_detach_mcast(b.qp, &group, 0)) {
		FAIL(name, "ibv_detach_mcast: %s", strerror(errno));
		return;
	}
	post_recv(&a);
	post_recv(&b);
	if (send_to(&s, ah, "once more") || !got(&a, "once more"))
		FAIL(name, "the QP still attached did not receive");
	else if (!nothing(&b))
		FAIL(name, "a detached QP received");
	else
		OK(name);

	name = "no loopback";
	{
		/* IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (mckey -l): what the QP sends
		 * to the group reaches no QP of this device; another create flag
		 * is refused. */
		struct q nl;
		struct ibv_qp_init_attr_ex ax = { .qp_type = IBV_QPT_UD, .send_cq = s.cq, .recv_cq = s.cq,
						  .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
						  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, .pd = pd,
						  .create_flags = IBV_QP_CREATE_SCATTER_FCS };
		struct ibv_qp *bad;
		errno = 0;
		bad = ibv_create_qp_ex(pd->context, &ax);
		if (bad) {
			FAIL(name, "ibv_create_qp_ex with IBV_QP_CREATE_SCATTER_FCS succeeded");
			ibv_destroy_qp(bad);
		} else if (errno != EOPNOTSUPP) {
			FAIL(name, "ibv_create_qp_ex with IBV_QP_CREATE_SCATTER_FCS: errno %d, want EOPNOTSUPP", errno);
		} else if (new_ud_flags(&nl, 4, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)) {
			FAIL(name, "ibv_create_qp_ex with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: %s", strerror(errno));
		} else {
			if (post_recv(&a) || send_to(&nl, ah, "not to myself"))
				FAIL(name, "send to the group failed");
			else if (!nothing(&a))
				FAIL(name, "a QP of the sender's device received its datagram");
			else if (send_to(&s, ah, "from another") || !got(&a, "from another"))
				FAIL(name, "a plain QP's datagram did not arrive");
			else
				OK(name);
			ibv_destroy_qp(nl.qp);
			ibv_destroy_cq(nl.cq);
		}
	}

	name = "attach errors";
	{
		struct ibv_qp_init_attr ia = { .send_cq = s.cq, .recv_cq = s.cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
		struct ibv_qp *rc = ibv_create_qp(pd, &ia);
		int e1 = ibv_attach_mcast(a.qp, &unicast, 0);
		int e2 = rc ? ibv_attach_mcast(rc, &group, 0) : -1;
		int e3 = ibv_detach_mcast(b.qp, &group, 0);
		if (e1 != EINVAL || e2 != EINVAL || e3 != EINVAL)
			FAIL(name, "unicast GID %d, RC QP %d, detach when not attached %d; want EINVAL (%d) each", e1, e2, e3, EINVAL);
		else
			OK(name);
		if (rc)
			ibv_destroy_qp(rc);
	}
	ibv_destroy_ah(ah);
	for (struct q *q = &s; q; q = q == &s ? &a : q == &a ? &b : q == &b ? &other : NULL) {
		ibv_destroy_qp(q->qp);
		ibv_destroy_cq(q->cq);
	}
	(void)ctx;
}

/* The rdma_cm calls' checks: errno as librdmacm and the kernel give it. */
static void test_cm_errors(const char *addr)
{
	const char *name = "cm errors";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *tcp;
	struct sockaddr_in src = { .sin_family = AF_INET }, grp = { .sin_family = AF_INET };
	struct sockaddr_un { unsigned short f; char p[30]; } bad = { .f = AF_UNIX };
	struct rdma_cm_join_mc_attr_ex ex = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					      .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER };
	struct rdma_cm_event *ev;
	char why[256] = "";
	int r;

	inet_pton(AF_INET, addr, &src.sin_addr);
	inet_pton(AF_INET, "239.60.200.3", &grp.sin_addr);
	ex.addr = (struct sockaddr *)&grp;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) || rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP)) {
		FAIL(name, "set-up: %s", strerror(errno));
		return;
	}
#define WANT(call, e) do { errno = 0; r = (call); if (r != -1 || errno != (e)) \
		snprintf(why + strlen(why), sizeof(why) - strlen(why), " %s: %d errno %d (want %d);", #call, r, errno, e); } while (0)
	WANT(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL), EINVAL);        /* unbound */
	if (rdma_bind_addr(id, (struct sockaddr *)&src) || rdma_bind_addr(tcp, (struct sockaddr *)&src)) {
		FAIL(name, "bind %s: %s", addr, strerror(errno));
		return;
	}
	WANT(rdma_join_multicast(tcp, (struct sockaddr *)&grp, NULL), EINVAL);       /* RDMA_PS_TCP */
	WANT(rdma_join_multicast(id, (struct sockaddr *)&bad, NULL), EINVAL);        /* no such family */
	WANT(rdma_join_multicast(id, NULL, NULL), EINVAL);
	WANT(rdma_leave_multicast(id, (struct sockaddr *)&grp), EADDRNOTAVAIL);      /* not joined */
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	WANT(rdma_join_multicast_ex(id, &ex, NULL), ENOTSUP);
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ex.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	WANT(rdma_join_multicast_ex(id, &ex, NULL), EINVAL);
	ex.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	if (rdma_join_multicast_ex(id, &ex, &grp) || rdma_get_cm_event(ch, &ev)) {
		snprintf(why + strlen(why), sizeof(why) - strlen(why), " send-only join: %s;", strerror(errno));
	} else {
		if (ev->event != RDMA_CM_EVENT_MULTICAST_JOIN || ev->id != id || ev->status ||
		    ev->param.ud.private_data != &grp || ev->param.ud.qp_num != 0xFFFFFF || ev->param.ud.qkey != 0x01234567 ||
		    !ev->param.ud.ah_attr.is_global || ev->param.ud.ah_attr.grh.dgid.raw[15] != 3)
			snprintf(why + strlen(why), sizeof(why) - strlen(why), " join event %s status %d qpn %#x qkey %#x;",
				 rdma_event_str(ev->event), ev->status, ev->param.ud.qp_num, ev->param.ud.qkey);
		rdma_ack_cm_event(ev);
		if (rdma_leave_multicast(id, (struct sockaddr *)&grp))
			snprintf(why + strlen(why), sizeof(why) - strlen(why), " leave: %s;", strerror(errno));
		WANT(rdma_leave_multicast(id, (struct sockaddr *)&grp), EADDRNOTAVAIL);
	}
	if (why[0])
		FAIL(name, "%s", why);
	else
		OK(name);
	rdma_destroy_id(id);
	rdma_destroy_id(tcp);
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!ctx || argc < 2) {
		printf("FAIL open: %s\n", strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	buf = calloc(8, SLOT);
	mr = pd ? ibv_reg_mr(pd, buf, 8 * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr) {
		printf("FAIL set-up: %s\n", strerror(errno));
		return 1;
	}
	test_attach(ctx);
	test_cm_errors(argv[1]);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(l);
	return failures;
}
