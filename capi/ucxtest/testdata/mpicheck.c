/* mpicheck: the MPI program of capi/ucxtest. Every byte it moves is checked:
 *   mpicheck            ping-pong between rank pairs (0-1, 2-3, ...) at sizes
 *                       1 B .. 4 MiB with a pattern of (rank, size, round,
 *                       index) verified on each side, allreduce and alltoall
 *                       checked against the values each rank must get, and a
 *                       barrier loop; rank 0 prints "mpicheck: OK N ranks".
 *   mpicheck bw SIZE N  ping-pong SIZE bytes N rounds between ranks 0 and 1
 *                       (payload checked once at the end); rank 0 prints
 *                       "mpicheck: bw SIZE MB/s" (both directions counted).
 *   mpicheck hang       each rank pings its pair partner forever (for the
 *                       test that kills a rank).
 * Any mismatch prints one line and aborts the job with exit code 3. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static unsigned char pat(int r, size_t n, int round, size_t i)
{
	uint64_t x = (uint64_t)r * 0x9E3779B97F4A7C15ull ^ (uint64_t)n * 0xC2B2AE3D27D4EB4Full ^
		     (uint64_t)round * 0x165667B19E3779F9ull ^ (uint64_t)i * 0x27D4EB2F165667C5ull;
	x ^= x >> 29;
	return (unsigned char)(x ^ (x >> 17) ^ i);
}

static void fill(unsigned char *b, int r, size_t n, int round)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(r, n, round, i);
}

static void check(const unsigned char *b, int r, size_t n, int round, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] != pat(r, n, round, i)) {
			fprintf(stderr, "mpicheck: rank %d: %s of %zu bytes from rank %d round %d: byte %zu is %#x, want %#x\n",
				rank, what, n, r, round, i, b[i], pat(r, n, round, i));
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
	}
}

static void fail(const char *msg, long got, long want)
{
	fprintf(stderr, "mpicheck: rank %d: %s: got %ld, want %ld\n", rank, msg, got, want);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

static void pingpong(unsigned char *sb, unsigned char *rb)
{
	int peer = rank ^ 1;
	if (peer >= size)
		return;
	for (size_t n = 1; n <= 4u << 20; n *= 4) {
		int rounds = n >= (1u << 20) ? 3 : 10;
		for (int round = 0; round < rounds; round++) {
			fill(sb, rank, n, round);
			memset(rb, 0, n);
			if (rank & 1) {
				MPI_Recv(rb, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check(rb, peer, n, round, "ping");
				MPI_Send(sb, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
			} else {
				MPI_Send(sb, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
				MPI_Recv(rb, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check(rb, peer, n, round, "pong");
			}
		}
	}
}

static void collectives(void)
{
	enum { N = 65536 };
	long *v = malloc(N * sizeof(long)), *sum = malloc(N * sizeof(long));
	for (int i = 0; i < N; i++)
		v[i] = (long)(rank + 1) * (i + 1);
	MPI_Allreduce(v, sum, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long ranks = (long)size * (size + 1) / 2;
	for (int i = 0; i < N; i++)
		if (sum[i] != ranks * (i + 1))
			fail("allreduce", sum[i], ranks * (i + 1));

	enum { PER = 8192 }; /* ints per rank pair */
	int *out = malloc((size_t)size * PER * sizeof(int)), *in = malloc((size_t)size * PER * sizeof(int));
	for (int d = 0; d < size; d++)
		for (int i = 0; i < PER; i++)
			out[d * PER + i] = rank * 1000003 + d * 1009 + i;
	MPI_Alltoall(out, PER, MPI_INT, in, PER, MPI_INT, MPI_COMM_WORLD);
	for (int s = 0; s < size; s++)
		for (int i = 0; i < PER; i++)
			if (in[s * PER + i] != s * 1000003 + rank * 1009 + i)
				fail("alltoall", in[s * PER + i], s * 1000003 + rank * 1009 + i);
	free(v), free(sum), free(out), free(in);
}

static void barriers(void)
{
	for (int i = 0; i < 200; i++) {
		int x = i * size + rank, got = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Allreduce(&x, &got, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (got != i * size + size - 1)
			fail("barrier round", got, i * size + size - 1);
	}
}

static void bw(size_t n, int rounds, unsigned char *sb, unsigned char *rb)
{
	int peer = rank ^ 1;
	if (peer >= size)
		return;
	fill(sb, rank, n, 0);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int i = 0; i < rounds; i++) {
		if (rank & 1) {
			MPI_Recv(rb, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(sb, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
		} else {
			MPI_Send(sb, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(rb, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		}
	}
	double t = MPI_Wtime() - t0;
	check(rb, peer, n, 0, "bw");
	if (rank == 0)
		printf("mpicheck: bw %zu %.1f MB/s\n", n, 2.0 * n * rounds / t / 1e6);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	size_t max = 4u << 20;
	if (argc >= 4 && strcmp(argv[1], "bw") == 0)
		max = strtoul(argv[2], NULL, 0);
	unsigned char *sb = malloc(max), *rb = malloc(max);
	if (!sb || !rb) {
		fprintf(stderr, "mpicheck: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (argc >= 4 && strcmp(argv[1], "bw") == 0) {
		bw(max, atoi(argv[3]), sb, rb);
	} else if (argc >= 2 && strcmp(argv[1], "hang") == 0) {
		int peer = rank ^ 1;
		if (rank == 0)
			printf("mpicheck: running\n"), fflush(stdout);
		for (unsigned round = 0; peer < size; round++) {
			if (rank & 1) {
				MPI_Recv(rb, 4096, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(sb, 4096, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
			} else {
				MPI_Send(sb, 4096, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
				MPI_Recv(rb, 4096, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			}
		}
	} else {
		pingpong(sb, rb);
		collectives();
		barriers();
		if (rank == 0)
			printf("mpicheck: OK %d ranks\n", size);
	}
	free(sb), free(rb);
	MPI_Finalize();
	return 0;
}
