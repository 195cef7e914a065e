//go:build linux && cgo && softroce_capi

// rsocket.c: librdmacm's rsocket calls (rsocket.h) over package rsocket.
// An rsocket is an eventfd, so that its number is a real descriptor no
// other file takes; the Go side maps the number to its socket, writes the
// eventfd when the socket may have changed, and rpoll/rselect wait on it
// beside the program's ordinary descriptors. Every call is one call into
// Go, except a blocking rrecv/rsend on a stream socket, which waits here
// on the eventfd between calls (sr_rs_recv); errno is set as librdmacm
// sets it. Datagram sockets (SOCK_DGRAM) are eventfds too.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <rdma/rsocket.h>

#include "capi.h"
#include "cm.h"
#include "_cgo_export.h"

#define SR_EXPORT __attribute__((visibility("default")))

/* sr_rs_device opens the device that owns address sa (NULL: the first)
 * and starts the CM on it, as an rdma_cm ID's first call does. */
int sr_rs_device(struct sockaddr *sa)
{
	int idx = 0, err;
	struct ibv_context *c;
	err = srgo_cm_device(sa, &idx);
	if (err)
		return err;
	c = sr_cm_ctx(idx);
	if (!c)
		return errno ? errno : ENODEV;
	return srgo_cm_attach(((struct sr_context *)((char *)c - offsetof(struct sr_context, vctx.context)))->h);
}

static inline int sr_rs_ret(int err)
{
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* sr_rs_sret turns a transfer call's result into the C convention; an
 * EAGAIN (a non-blocking socket with nothing to do yet, which programs ask
 * again in a loop) takes a turn of sr_idle_go. */
static inline ssize_t sr_rs_sret(ssize_t n)
{
	if (n < 0) {
		if (n == -EAGAIN)
			sr_idle_go();
		errno = (int)-n;
		return -1;
	}
	return n;
}

/* The rsockets set non-blocking (SOCK_NONBLOCK, rfcntl): a call on one
 * does not wait, so it holds no signals (sr_sig_hold). A descriptor beyond
 * the map counts as blocking. */
#define SR_RS_NB_MAX 65536
static unsigned char sr_rs_nb[SR_RS_NB_MAX / 8];

static void sr_rs_set_nb(int fd, int on)
{
	if (fd < 0 || fd >= SR_RS_NB_MAX)
		return;
	if (on)
		__atomic_fetch_or(&sr_rs_nb[fd / 8], (unsigned char)(1u << (fd % 8)), __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&sr_rs_nb[fd / 8], (unsigned char)~(1u << (fd % 8)), __ATOMIC_RELAXED);
}

/* sr_rs_may_wait: a call on socket with flags may wait, and so holds the
 * program's signals from its start: one that lands while the library works
 * before the call's first wait must end that wait, not be lost to it. */
static int sr_rs_may_wait(int socket, int flags)
{
	if (flags & MSG_DONTWAIT)
		return 0;
	if (socket < 0 || socket >= SR_RS_NB_MAX)
		return 1;
	return !(__atomic_load_n(&sr_rs_nb[socket / 8], __ATOMIC_RELAXED) & (1u << (socket % 8)));
}

SR_EXPORT int rsocket(int domain, int type, int protocol)
{
	int fd = srgo_rs_socket(domain, type, protocol);
	if (fd < 0) {
		errno = -fd;
		return -1;
	}
	sr_rs_set_nb(fd, type & SOCK_NONBLOCK);
	return fd;
}

SR_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)addrlen;
	return sr_rs_ret(srgo_rs_bind(socket, (struct sockaddr *)addr));
}

SR_EXPORT int rlisten(int socket, int backlog)
{
	return sr_rs_ret(srgo_rs_listen(socket, backlog));
}

/* raccept waits, when the listener blocks, in poll(2) on its eventfd
 * (written when a connection is ready), not inside Go: a signal then ends
 * it with EINTR, as librdmacm's read of its accept queue. */
SR_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	int fd, held = sr_rs_may_wait(socket, 0) ? sr_sig_hold() : 0;
	for (;;) {
		int wait = 0;
		fd = srgo_rs_accept(socket, &wait);
		if (fd == -EAGAIN && wait) {
			struct pollfd p = { .fd = socket, .events = POLLIN };
			uint64_t v;
			int r;
			if (!held)
				held = sr_sig_hold();
			r = sr_poll(&p, 1, 100); /* the bound guards against a lost wake-up */
			if (r < 0 && errno == EINTR) {
				if (held)
					sr_sig_release();
				return -1;
			}
			if (r > 0)
				(void)!read(socket, &v, sizeof v);
			continue;
		}
		break;
	}
	if (held)
		sr_sig_release();
	if (fd < 0) {
		if (fd == -EAGAIN)
			sr_idle_go();
		errno = -fd;
		return -1;
	}
	int fl = srgo_rs_fcntl(fd, F_GETFL, 0);
	sr_rs_set_nb(fd, fl > 0 && (fl & O_NONBLOCK));
	if (addr && addrlen)
		srgo_rs_name(fd, 1, addr, addrlen);
	return fd;
}

SR_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)addrlen;
	return sr_rs_ret(srgo_rs_connect(socket, (struct sockaddr *)addr));
}

SR_EXPORT int rshutdown(int socket, int how)
{
	return sr_rs_ret(srgo_rs_shutdown(socket, how));
}

SR_EXPORT int rclose(int socket)
{
	int err = srgo_rs_close(socket);
	if (err)
		return err; /* librdmacm returns EBADF itself, errno untouched */
	sr_rs_set_nb(socket, 0);
	close(socket);
	return 0;
}

/* sr_rs_block waits until the socket's eventfd is written (the Go side
 * armed the connection's completion events; the device's goroutine writes
 * it), and clears it, or until the device's link holds a datagram, which
 * the next call then handles on this thread (srgo_rs_block). The bound
 * only guards against a lost wake-up. */
static int sr_rs_block(int socket)
{
	struct pollfd p = { .fd = socket, .events = POLLIN };
	uint64_t v;
	int r = srgo_rs_block(socket); /* waits on the device's link too */
	if (r == -2)
		return -EINTR; /* a signal: the call returns EINTR, as librdmacm's */
	if (r < 0) {
		r = sr_poll(&p, 1, 100);
		if (r < 0 && errno == EINTR)
			return -EINTR;
		if (r > 0)
			(void)!read(socket, &v, sizeof v);
		return 0;
	}
	if (r & 1)
		(void)!read(socket, &v, sizeof v);
	return 0;
}

/* A blocking receive or send waits here, in C, not inside Go: a thread
 * parked in Go is woken by the device's goroutine handing it the
 * processor (two thread wake-ups); a thread in poll(2) is woken by the
 * kernel when the eventfd is written (one). The Go side says, through
 * wait, that the socket is blocking and the call was made not to park. */
static ssize_t sr_rs_recv_loop(int socket, void *buf, size_t len, int flags, int *held)
{
	size_t got = 0;
	for (;;) {
		int wait = 0;
		ssize_t n = srgo_rs_recv(socket, (char *)buf + got, len - got, flags, &wait);
		if (n > 0) {
			got += (size_t)n;
			if (!wait || !(flags & MSG_WAITALL) || got == len)
				return (ssize_t)got;
			continue;
		}
		if (n == -EAGAIN && wait) {
			if (!*held)
				*held = sr_sig_hold();
			if (sr_rs_block(socket) == -EINTR)
				return got ? (ssize_t)got : -EINTR;
			continue;
		}
		return got ? (ssize_t)got : n;
	}
}

/* A call that may wait holds the program's signals from its start
 * (sr_sig_hold; a blocking socket's call that turns out to wait, from its
 * first wait), so that one arriving outside a wait (the Go side's work, the
 * spin before a wait, a wait's bound running out) ends the next
 * wait with EINTR instead of being taken there and lost to it. */
static ssize_t sr_rs_recv(int socket, void *buf, size_t len, int flags)
{
	int held = sr_rs_may_wait(socket, flags) ? sr_sig_hold() : 0;
	ssize_t n = sr_rs_recv_loop(socket, buf, len, flags, &held);
	if (held)
		sr_sig_release();
	return n;
}

static ssize_t sr_rs_send_loop(int socket, void *buf, size_t len, int flags, int *held)
{
	size_t sent = 0;
	for (;;) {
		int wait = 0;
		ssize_t n = srgo_rs_send(socket, (char *)buf + sent, len - sent, flags, &wait);
		if (n > 0) {
			sent += (size_t)n;
			if (!wait || sent == len)
				return (ssize_t)sent;
			continue;
		}
		if (n == -EAGAIN && wait) {
			if (!*held)
				*held = sr_sig_hold();
			if (sr_rs_block(socket) == -EINTR)
				return sent ? (ssize_t)sent : -EINTR;
			continue;
		}
		return sent ? (ssize_t)sent : n;
	}
}

/* A send waits only when the peer's ring is full; it holds the signals
 * from its first wait, sparing each send two system calls. */
static ssize_t sr_rs_send(int socket, void *buf, size_t len, int flags)
{
	int held = 0;
	ssize_t n = sr_rs_send_loop(socket, buf, len, flags, &held);
	if (held)
		sr_sig_release();
	return n;
}

SR_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	return sr_rs_sret(sr_rs_recv(socket, buf, len, flags));
}

SR_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen)
{
	if (srgo_rs_is_dgram(socket))
		return sr_rs_sret(srgo_rs_recvfrom(socket, buf, len, flags, src_addr, addrlen));
	ssize_t n = sr_rs_sret(sr_rs_recv(socket, buf, len, flags));
	if (n > 0 && src_addr && addrlen)
		srgo_rs_name(socket, 1, src_addr, addrlen);
	return n;
}

/* As librdmacm: only the first vector is filled. */
SR_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen) {
		errno = ENOTSUP;
		return -1;
	}
	if (!msg->msg_iovlen)
		return 0;
	if (srgo_rs_is_dgram(socket)) {
		/* A datagram socket says where the datagram came from, as
		 * recvmsg(2) on UDP does (librdmacm's own datagram rsockets
		 * have no rrecvmsg that works). */
		socklen_t alen = msg->msg_namelen;
		ssize_t n = sr_rs_sret(srgo_rs_recvfrom(socket, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
							 flags, msg->msg_name, msg->msg_name ? &alen : NULL));
		if (n >= 0 && msg->msg_name)
			msg->msg_namelen = alen;
		return n;
	}
	return sr_rs_sret(sr_rs_recv(socket, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, msg->msg_flags));
}

SR_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
	return sr_rs_sret(sr_rs_recv(socket, buf, count, 0));
}

SR_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	if (iovcnt <= 0)
		return 0;
	return sr_rs_sret(sr_rs_recv(socket, iov[0].iov_base, iov[0].iov_len, 0));
}

SR_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	return sr_rs_sret(sr_rs_send(socket, (void *)buf, len, flags));
}

SR_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	(void)addrlen;
	if (!dest_addr)
		return sr_rs_sret(sr_rs_send(socket, (void *)buf, len, flags));
	return sr_rs_sret(srgo_rs_sendto(socket, (void *)buf, len, flags, (struct sockaddr *)dest_addr));
}

/* On a datagram socket the vectors make one datagram, as sendmsg(2) and
 * writev(2) on UDP: gathered here (a datagram rsocket carries at most
 * 2040 bytes; the Go side refuses more with EMSGSIZE) and sent to `to`, or
 * to the connected peer when it is NULL. */
static ssize_t sr_rs_dgram_sendv(int socket, const struct iovec *iov, int iovcnt, int flags, const void *to)
{
	char buf[4096];
	size_t n = 0;

	if (iovcnt < 0) {
		errno = EINVAL;
		return -1;
	}
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > sizeof(buf) - n) {
			errno = EMSGSIZE;
			return -1;
		}
		memcpy(buf + n, iov[i].iov_base, iov[i].iov_len);
		n += iov[i].iov_len;
	}
	if (to)
		return sr_rs_sret(srgo_rs_sendto(socket, buf, n, flags, (struct sockaddr *)to));
	return sr_rs_sret(sr_rs_send(socket, buf, n, flags));
}

SR_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen) {
		errno = ENOTSUP;
		return -1;
	}
	if (srgo_rs_is_dgram(socket))
		return sr_rs_dgram_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name);
	return sr_rs_sret(srgo_rs_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags));
}

SR_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return sr_rs_sret(sr_rs_send(socket, (void *)buf, count, 0));
}

SR_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	if (srgo_rs_is_dgram(socket))
		return sr_rs_dgram_sendv(socket, iov, iovcnt, 0, NULL);
	return sr_rs_sret(srgo_rs_sendv(socket, (struct iovec *)iov, iovcnt, 0));
}

SR_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return sr_rs_ret(srgo_rs_name(socket, 1, addr, addrlen));
}

SR_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return sr_rs_ret(srgo_rs_name(socket, 0, addr, addrlen));
}

SR_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	return sr_rs_ret(srgo_rs_setsockopt(socket, level, optname, (void *)optval, optlen));
}

SR_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	return sr_rs_ret(srgo_rs_getsockopt(socket, level, optname, optval, optlen));
}

SR_EXPORT int rfcntl(int socket, int cmd, ... /* arg */)
{
	va_list args;
	int arg = 0, ret;
	va_start(args, cmd);
	if (cmd == F_SETFL)
		arg = va_arg(args, int);
	va_end(args);
	ret = srgo_rs_fcntl(socket, cmd, arg);
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	if (cmd == F_SETFL)
		sr_rs_set_nb(socket, arg & O_NONBLOCK);
	return ret;
}

SR_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	int err = 0;
	int64_t r = srgo_rs_iomap(socket, buf, len, prot, flags, offset, &err);
	if (err) {
		errno = err;
		return -1;
	}
	return (off_t)r;
}

SR_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	return sr_rs_ret(srgo_rs_iounmap(socket, buf, len));
}

SR_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	return (size_t)sr_rs_sret(srgo_rs_iowrite(socket, (void *)buf, count, offset, flags));
}

/* rpoll: rsockets ask Go what is ready; ordinary descriptors ask poll.
 * When nothing is, the rsockets are armed (their next change writes their
 * eventfd) and one poll waits on every descriptor, the rsockets' eventfds
 * for POLLIN. Without rsockets it is poll. */

static uint64_t sr_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* srgo_rs_poll's bit for "polled the device's socket" (rsPolledLink). */
#define SR_RS_POLLED_LINK 0x10000

/* sr_rs_check: the first rsocket of the round that finds nothing ready
 * polls the device's socket (receiving on this thread, as a non-blocking
 * call does); the rest do not, a system call each (their device is almost
 * always the same one). */
static int sr_rs_check(struct pollfd *fds, nfds_t nfds, const char *isrs, int arm)
{
	int cnt = 0, linked = 0;
	for (nfds_t i = 0; i < nfds; i++) {
		if (isrs[i]) {
			int r = srgo_rs_poll(fds[i].fd, fds[i].events, arm, !linked);
			if (r >= 0 && (r & SR_RS_POLLED_LINK)) {
				linked = 1;
				r &= ~SR_RS_POLLED_LINK;
			}
			fds[i].revents = r < 0 ? POLLNVAL : (short)r;
		} else {
			fds[i].revents = 0;
			if (fds[i].fd >= 0)
				poll(&fds[i], 1, 0);
		}
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

SR_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	char small[64], *isrs = small;
	struct pollfd rsmall[64], *rfds = rsmall;
	int nrs = 0, ret, held = 0;
	uint64_t start;

	if (nfds > 64) {
		isrs = malloc(nfds);
		rfds = malloc(nfds * sizeof(*rfds));
		if (!isrs || !rfds) {
			free(isrs == small ? NULL : isrs);
			free(rfds == rsmall ? NULL : rfds);
			errno = ENOMEM;
			return -1;
		}
	}
	for (nfds_t i = 0; i < nfds; i++) {
		isrs[i] = fds[i].fd >= 0 && srgo_rs_is(fds[i].fd);
		nrs += isrs[i];
	}
	if (!nrs) {
		ret = sr_poll(fds, nfds, timeout);
		goto out;
	}
	start = sr_now_us();
	/* Spin a little first (librdmacm's polling_time, 10 us). */
	do {
		ret = sr_rs_check(fds, nfds, isrs, 0);
		if (ret)
			goto out;
		if (!timeout) {
			sr_idle_go();
			goto out;
		}
	} while (sr_now_us() - start <= 10);

	held = sr_sig_hold(); /* as a blocking rrecv (sr_rs_recv) */
	for (;;) {
		int left = -1;
		for (nfds_t i = 0; i < nfds; i++) {
			if (isrs[i]) {
				uint64_t v;
				while (read(fds[i].fd, &v, sizeof v) == sizeof v)
					;
			}
		}
		ret = sr_rs_check(fds, nfds, isrs, 1);
		if (ret)
			break;
		if (timeout >= 0) {
			left = timeout - (int)((sr_now_us() - start) / 1000);
			if (left <= 0) {
				ret = 0;
				break;
			}
		}
		/* One rsocket alone: wait on its device's socket too, as a
		 * blocking call does (sr_rs_block), so that the datagram that
		 * answers wakes this thread, which then receives it itself. */
		if (nfds == 1 && isrs[0]) {
			int w = srgo_rs_wait(fds[0].fd, left);
			if (w == -2) {
				errno = EINTR;
				ret = -1;
				break;
			}
			if (w >= 0)
				continue;
		}
		for (nfds_t i = 0; i < nfds; i++) {
			rfds[i].fd = fds[i].fd;
			rfds[i].events = isrs[i] ? POLLIN : fds[i].events;
			rfds[i].revents = 0;
		}
		ret = sr_poll(rfds, nfds, left);
		if (ret < 0)
			break;
	}
out:
	if (held)
		sr_sig_release();
	if (isrs != small)
		free(isrs);
	if (rfds != rsmall)
		free(rfds);
	return ret;
}

SR_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, to;

	fds = calloc(nfds > 0 ? nfds : 1, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	to = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	ret = rpoll(fds, n, to);
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	if (ret > 0) {
		ret = 0;
		for (int i = 0; i < n; i++) {
			if (!fds[i].revents)
				continue;
			if (readfds && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
				FD_SET(fds[i].fd, readfds);
				ret++;
			}
			if (writefds && (fds[i].revents & POLLOUT)) {
				FD_SET(fds[i].fd, writefds);
				ret++;
			}
			if (exceptfds && (fds[i].revents & ~(POLLIN | POLLOUT))) {
				FD_SET(fds[i].fd, exceptfds);
				ret++;
			}
		}
	}
	free(fds);
	return ret;
}
