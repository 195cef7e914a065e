package capitest

import "testing"

// TestCMCompat runs testdata/cm_compat.c: librdmacm behaviour programs
// rely on without saying so.
//   - rdma_connect and rdma_accept with no parameters take the device's
//     RDMA READ depths (an RDMA READ then works); a depth above the
//     device's is EINVAL.
//   - The passive ESTABLISHED has no private data; ADDR_RESOLVED leaves the
//     route's GIDs and P_Key.
//   - rdma_set_option answers EINVAL for a known option of the wrong size
//     and ENOSYS for an unknown one.
//   - rdma_destroy_id waits until the ID's events are acknowledged, and a
//     request acknowledged after its ID was destroyed is harmless.
//   - rdma_migrate_id makes an rdma_create_ep ID asynchronous on the
//     program's channel (which destroying the ID leaves open) and
//     synchronous again; rdma_accept on a synchronous UD ID returns.
//   - rdma_getaddrinfo derives the QP type and the port space from each
//     other and returns getaddrinfo's EAI_ code for a failed lookup.
//   - rdma_create_qp_ex takes the ibv_wr_* send ops and writes back the PD
//     and CQs it used.
//   - rdma_disconnect after REJECTED answers 0 and moves the QP to the
//     error state, as the kernel's.
//   - The channel's fd is readable exactly while events wait, also after a
//     blocking rdma_get_cm_event handled a burst of requests on its own
//     thread and took the first (srgo_cm_wait holds the fd back meanwhile).
func TestCMCompat(t *testing.T) {
	runC(t, "cm_compat.c", 13)
}
