// Command speedtable measures softroce against kernel TCP on loopback and
// prints the speed table of the README in one run:
//
//	go run ./internal/speedtable [-rounds 3] [-dur 3] [-only bw1m,send_lat,...]
//
// It builds cmd/softroce once, then for each round runs every case as two
// processes (server on 127.0.0.1, client on 127.0.0.2, a free TCP port per
// run), alternating softroce and its TCP baseline (tcp_bw, tcp_lat) and
// swapping their order every other round. It reports medians over the
// rounds: bandwidth and message rate, CPU time and context switches of both
// processes per MiB (wait4's rusage), latency (typical and minimum), the
// demo's in-process half round trip, the link/udp loopback benchmark as the
// raw UDP ceiling (its rate, and its CPU per MiB against a TCP stream in the
// same process: the floor under softroce's, run every round and set against
// the 1 MiB WRITE stream's CPU per MiB), and many QPs against one. System calls are counted in a
// separate round: with perf stat (the raw_syscalls:sys_enter tracepoint,
// counted in the kernel) where it works, else under strace -f -c, which
// stops the processes at every call and so changes how they batch. The 1-minute load average is printed beside each
// figure. Every child runs in its own process group, bounded in time and
// killed on exit; a failed measurement prints a line and the command exits
// with status 1.
//
// It is a command, not a test, so that plain "go test ./..." runs only its
// parsing tests and a rerun prints progress as it goes. Linux only.
package main
