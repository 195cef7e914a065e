/* cmcheck.h: what the rdma_cm C tests share: their "ok NAME" / "FAIL NAME:
 * why" lines and failure count, the event channel and device address under
 * test, taking the channel's next event with a bound, and an ID resolved
 * toward a port. */
#ifndef CMCHECK_H
#define CMCHECK_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static int failures;
static struct rdma_event_channel *ch;
static struct sockaddr_in addr; /* the device's; the tests set its port */

#define FAIL(name, ...) do { printf("FAIL %s: ", name); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define OK(name) printf("ok %s\n", name)

/* next_on waits up to 10 s for an event on channel c. */
static inline struct rdma_cm_event *next_on(struct rdma_event_channel *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 10000) != 1)
		return NULL;
	if (rdma_get_cm_event(c, &ev))
		return NULL;
	return ev;
}

/* next waits up to 10 s for an event on ch. */
static inline struct rdma_cm_event *next(void)
{
	return next_on(ch);
}

/* expect takes ch's next event and checks its type. */
static inline struct rdma_cm_event *expect(const char *name, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next();
	if (!ev) {
		FAIL(name, "no event (want %s)", rdma_event_str(want));
		return NULL;
	}
	if (ev->event != want) {
		FAIL(name, "event %s status %d, want %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

/* resolved makes an ID on ch resolved toward port of addr, its route too. */
static inline struct rdma_cm_id *resolved(const char *name, uint16_t port)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = addr;
	dst.sin_port = htons(port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) {
		FAIL(name, "create/resolve: %s", strerror(errno));
		return NULL;
	}
	if (!(ev = expect(name, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return NULL;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || !(ev = expect(name, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return NULL;
	rdma_ack_cm_event(ev);
	return id;
}

#endif
