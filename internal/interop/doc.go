// Package interop holds only tests: softroce's tools against the Linux
// kernel's Soft-RoCE (rdma_rxe) with rdma-core 44 and perftest 4.5, live.
//
// The kernel side runs in qemu guests booted by the rxe-peer harness
// (shared/rxe-peer, next to the repository or named by SOFTROCE_RXE_PEER) on
// a bridge in a network namespace; softroce runs in that namespace. The tests
// cover every tool family in both roles (ibv_{rc,uc,ud,srq}_pingpong,
// perftest's send/write/read/atomic bw and lat tests over TCP and rdma_cm,
// rping), and 4 MiB RDMA READ and WRITE under 2% loss and under reordering
// (netem in the guest), where the packets each side sent are held against
// what two kernels need under the same conditions.
//
// They need root, qemu and the harness's guest image, and run only when asked:
//
//	SOFTROCE_INTEROP=smoke go test -v ./internal/interop   # the CI subset (a few minutes)
//	SOFTROCE_INTEROP=all go test -v -timeout 60m ./internal/interop
//
// ORACLE_NS (default rxepeer) names the namespace and SOFTROCE_INTEROP_GUESTS
// (default 1,2) the two guest numbers, so that several users of one machine
// do not share guests. SOFTROCE_INTEROP_PCAP names a directory where the
// softroce side of each tool run writes its traffic (--pcap), one file per
// test. Without SOFTROCE_INTEROP, or when root, qemu, the
// harness or the image is missing, every test skips and says why.
package interop
