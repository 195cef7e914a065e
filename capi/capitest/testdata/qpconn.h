/* qpconn.h: what the C tests share: bringing an RC QP of this device to
 * RTS towards another QP of the same device, and waiting for a completion. */
#ifndef QPCONN_H
#define QPCONN_H

#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static inline int qp_init(struct ibv_qp *qp, unsigned int access)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = access };
	return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* qp_rtr_rts moves an INIT QP to RTR and RTS, connected to QP dest at gid. */
static inline int qp_rtr_rts(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
				  .rq_psn = 1, .max_dest_rd_atomic = 1, .min_rnr_timer = 12 };
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = *gid;
	at.ah_attr.grh.sgid_index = 1;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.sq_psn = 1;
	at.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* wait_wc polls cq for one completion, up to 5 s; 0 if none came. */
static inline int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < 50000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		usleep(100);
	}
	return 0;
}

#endif
