package capitest

import "testing"

// TestVerbsCompat runs testdata/verbs_compat.c: answers the library gives
// as libibverbs with rxe does. The ibv_wr_* setters copy the inline data
// and the SGE list they are handed (four WRs from one reused buffer carry
// four values) and refuse more than the QP's caps with ENOSPC; a batch
// grows to the send queue's depth (100 WRs, a 200-byte inline list) and
// one WR beyond it fails whole; ibv_qp_to_qp_ex answers NULL for
// ibv_create_qp's QPs; IBV_QP_INIT_ATTR_SEND_OPS_FLAGS installs the wr_*
// frame with no send ops, and a UD QP may ask for SENDs only;
// ibv_req_notify_cq without a channel is 0;
// num_comp_vectors is the possible CPUs; ibv_reg_mr refuses length 0,
// unknown access bits, a mismatched iova page offset (EINVAL) and
// unmapped memory (EFAULT); ibv_rereg_mr's input checks; the post calls'
// bad_wr; ibv_init_ah_from_wc without a GRH.
func TestVerbsCompat(t *testing.T) {
	runC(t, "verbs_compat.c", 11)
}
