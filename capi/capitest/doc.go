// Package capitest tests softroce's C library (package capi) the way its
// users meet it: it builds libibverbs.so.1, then runs Debian's stock
// rdma-core and perftest binaries, unmodified, in pairs over it, crossed
// with softroce's Go tools, and C programs of its own for the error paths.
//
// Without a C compiler, the libibverbs/librdmacm headers or the stock
// binaries the tests skip, naming what is missing; with CI=true or
// SOFTROCE_REQUIRE_TOOLS=1 in the environment such a skip is a failure.
package capitest
