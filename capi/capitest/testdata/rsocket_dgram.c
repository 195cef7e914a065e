/* rsocket_dgram.c: datagram rsockets (SOCK_DGRAM) through the library, in
 * one process on the device at argv[1]: a pair of sockets exchanging
 * datagrams (the first over UDP, the rest over UD), the source addresses
 * recvfrom reports, rsendmsg/rwritev gathering their vectors into one
 * datagram and rrecvmsg naming its source, rpoll, and the failure paths: a datagram to a port
 * with no rsocket (sent without an error and lost, as librdmacm's: a
 * read then finds nothing, rpoll times out), a datagram too long, a read
 * before the socket has an address. Prints "ok NAME" or "FAIL NAME: why";
 * exits non-zero on a failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rsocket.h>

static int failures;
#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* recv_wait reads a datagram from a blocking socket, bounded by rpoll. */
static ssize_t recv_wait(int fd, void *b, size_t n, struct sockaddr_in *from)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	socklen_t len = sizeof *from;
	if (rpoll(&p, 1, 5000) != 1)
		return -2;
	return rrecvfrom(fd, b, n, 0, (struct sockaddr *)from, &len);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET }, sb, from, name;
	socklen_t len;
	int a, b, port;
	char buf[4096];
	const char *n;

	if (argc < 2 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: %s ADDRESS\n", argv[0]);
		return 2;
	}
	port = 20000 + getpid() % 20000;
	sa.sin_port = htons(port);
	sb = sa;
	sb.sin_port = htons(port + 1);

	n = "dgram read before an address";
	a = rsocket(AF_INET, SOCK_DGRAM, 0);
	errno = 0;
	if (a < 0)
		FAIL(n, "rsocket: errno %d", errno);
	else if (rrecv(a, buf, 10, MSG_DONTWAIT) != -1 || errno != EINVAL)
		FAIL(n, "rrecv: errno %d, want EINVAL", errno);
	else
		OK(n);

	n = "dgram pair";
	b = rsocket(AF_INET, SOCK_DGRAM, 0);
	if (b < 0 || rbind(a, (struct sockaddr *)&sa, sizeof sa) || rbind(b, (struct sockaddr *)&sb, sizeof sb)) {
		FAIL(n, "rsocket/rbind: errno %d", errno);
		return 1;
	}
	len = sizeof name;
	if (rgetsockname(b, (struct sockaddr *)&name, &len) || name.sin_port != sb.sin_port ||
	    name.sin_addr.s_addr != sb.sin_addr.s_addr) {
		FAIL(n, "rgetsockname: errno %d, port %d", errno, ntohs(name.sin_port));
	} else {
		int i, err = 0;
		for (i = 0; i < 20 && !err; i++) {
			ssize_t k;
			snprintf(buf, sizeof buf, "ping %d", i);
			if (rsendto(a, buf, strlen(buf) + 1, 0, (struct sockaddr *)&sb, sizeof sb) != (ssize_t)strlen(buf) + 1) {
				FAIL(n, "rsendto %d: errno %d", i, errno);
				err = 1;
			} else if ((k = recv_wait(b, buf, sizeof buf, &from)) <= 0 || strncmp(buf, "ping ", 5) ||
				   from.sin_port != sa.sin_port || from.sin_addr.s_addr != sa.sin_addr.s_addr) {
				FAIL(n, "b's rrecvfrom %d: %zd, errno %d, from port %d", i, k, errno, ntohs(from.sin_port));
				err = 1;
			} else if (rsendto(b, "pong", 5, 0, (struct sockaddr *)&from, sizeof from) != 5) {
				FAIL(n, "reply %d: errno %d", i, errno);
				err = 1;
			} else if ((k = recv_wait(a, buf, sizeof buf, &from)) != 5 || strcmp(buf, "pong") ||
				   from.sin_port != sb.sin_port) {
				FAIL(n, "a's rrecvfrom %d: %zd, errno %d", i, k, errno);
				err = 1;
			}
		}
		if (!err)
			OK(n);
	}

	n = "dgram rsendmsg rrecvmsg";
	{
		struct iovec out[3] = { { "one,", 4 }, { "", 0 }, { "two", 4 } }, in = { buf, sizeof buf };
		struct msghdr mo = { .msg_name = &sb, .msg_namelen = sizeof sb, .msg_iov = out, .msg_iovlen = 3 };
		struct msghdr mi = { .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &in, .msg_iovlen = 1 };
		struct pollfd p = { .fd = b, .events = POLLIN };
		ssize_t k;
		memset(&from, 0, sizeof from);
		if ((k = rsendmsg(a, &mo, 0)) != 8)
			FAIL(n, "rsendmsg: %zd, errno %d, want 8 (one datagram of the three vectors)", k, errno);
		else if (rpoll(&p, 1, 5000) != 1 || (k = rrecvmsg(b, &mi, 0)) != 8 || memcmp(buf, "one,two", 8))
			FAIL(n, "rrecvmsg: %zd, errno %d, \"%.8s\"", k, errno, buf);
		else if (mi.msg_namelen != sizeof from || from.sin_port != sa.sin_port ||
			 from.sin_addr.s_addr != sa.sin_addr.s_addr)
			FAIL(n, "rrecvmsg's source: namelen %u, port %d", (unsigned)mi.msg_namelen, ntohs(from.sin_port));
		else if (rconnect(b, (struct sockaddr *)&sa, sizeof sa) || (k = rwritev(b, out, 3)) != 8)
			FAIL(n, "rconnect, rwritev: %zd, errno %d", k, errno);
		else if ((k = recv_wait(a, buf, sizeof buf, &from)) != 8 || memcmp(buf, "one,two", 8))
			FAIL(n, "rwritev's datagram: %zd, errno %d", k, errno);
		else
			OK(n);
	}

	n = "dgram too long";
	errno = 0;
	if (rsendto(a, buf, 2041, 0, (struct sockaddr *)&sb, sizeof sb) != -1 || errno != EMSGSIZE)
		FAIL(n, "rsendto 2041 bytes: errno %d, want EMSGSIZE", errno);
	else
		OK(n);

	n = "dgram to no rsocket";
	{
		struct sockaddr_in dead = sa;
		struct pollfd p = { .fd = a, .events = POLLIN };
		double t0;
		int i, err = 0;
		dead.sin_port = htons(port + 2);
		for (i = 0; i < 3 && !err; i++) {
			errno = 0;
			if (rsendto(a, "anyone?", 8, 0, (struct sockaddr *)&dead, sizeof dead) != 8) {
				FAIL(n, "rsendto %d: errno %d, want it sent", i, errno);
				err = 1;
			}
		}
		errno = 0;
		if (!err && (rrecv(a, buf, sizeof buf, MSG_DONTWAIT) != -1 || errno != EAGAIN)) {
			FAIL(n, "rrecv MSG_DONTWAIT: errno %d, want EAGAIN", errno);
			err = 1;
		}
		t0 = now();
		if (!err && rpoll(&p, 1, 200) != 0) {
			FAIL(n, "rpoll: revents %#x, want a timeout", p.revents);
			err = 1;
		}
		if (!err && (now() - t0 < 0.15 || now() - t0 > 5)) {
			FAIL(n, "rpoll's 200 ms took %.3f s", now() - t0);
			err = 1;
		}
		if (!err)
			OK(n);
	}
	if (rclose(a) || rclose(b))
		FAIL("dgram close", "errno %d", errno);
	return failures ? 1 : 0;
}
