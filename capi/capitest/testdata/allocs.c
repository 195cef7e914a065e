/* allocs.c: ITER SEND round trips between two RC QPs of one device, every
 * call on the per-work-request and per-poll paths (ibv_post_recv,
 * ibv_post_send, ibv_poll_cq on empty and full CQs, which also polls the
 * device's link); capitest runs it at two counts and compares the Go
 * runtime's allocation counts the library prints at close (SOFTROCE_DEBUG).
 * Prints "ok ITER" or "FAIL why". */
#include <stdio.h>
#include <stdlib.h>
#include "qpconn.h"

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 1000;
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0]) {
		printf("FAIL no device\n");
		return 1;
	}
	struct ibv_context *c = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(c);
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *scq = ibv_create_cq(c, 64, NULL, NULL, 0), *rcq = ibv_create_cq(c, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	union ibv_gid gid;
	if (!mr || !a || !b || ibv_query_gid(c, 1, 1, &gid) || qp_init(a, 0) || qp_init(b, 0) ||
	    qp_rtr_rts(a, b->qp_num, &gid) || qp_rtr_rts(b, a->qp_num, &gid)) {
		printf("FAIL set-up\n");
		return 1;
	}
	struct ibv_sge ss = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_sge rs = { .addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr swr = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bs;
	struct ibv_recv_wr rwr = { .sg_list = &rs, .num_sge = 1 }, *br;
	struct ibv_wc wc;
	for (long i = 0; i < iters; i++) {
		swr.wr_id = rwr.wr_id = i;
		if (ibv_post_recv(b, &rwr, &br) || ibv_post_send(a, &swr, &bs)) {
			printf("FAIL post %ld\n", i);
			return 1;
		}
		for (int got = 0; got < 2;) {
			int n = ibv_poll_cq(scq, 1, &wc) + ibv_poll_cq(rcq, 1, &wc);
			if (n && wc.status != IBV_WC_SUCCESS) {
				printf("FAIL completion %ld: %s\n", i, ibv_wc_status_str(wc.status));
				return 1;
			}
			got += n;
		}
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	printf("ok %ld\n", iters);
	return 0;
}
