// Package ucxtest runs UCX and Open MPI, unmodified, over softroce's C
// library: ucx_info lists the device's rc_verbs and ud_verbs transports,
// ucx_perftest pairs run over each, and an MPI program (testdata/mpicheck.c,
// every byte checked) runs with 2 and 4 ranks on one host and with 2 + 2
// ranks across two network namespaces, with shared memory and TCP off so
// that all its data crosses softroce; killing a rank ends the job.
//
// Each program runs through softroce exec, whose private view of
// /dev/infiniband and /sys/class/infiniband UCX needs to find the device.
// Without ucx_info/ucx_perftest (ucx-utils), mpirun/mpicc (openmpi-bin,
// libopenmpi-dev), a C compiler or the libibverbs headers the tests skip,
// naming what is missing; with CI=true or SOFTROCE_REQUIRE_TOOLS=1 such a
// skip is a failure. The namespace test needs root and iproute2.
package ucxtest
