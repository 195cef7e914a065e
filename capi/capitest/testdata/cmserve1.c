/* cmserve1: cmtime's server on one thread. It listens on ADDR:PORT and, for
 * each connection, does on the thread that takes the events what stock
 * cmtime's server hands to two other threads, and what softroce's Go
 * cmtime server does on one goroutine: rdma_create_qp (cmtime's QP
 * attributes) and rdma_accept on CONNECT_REQUEST; rdma_disconnect,
 * rdma_destroy_qp and rdma_destroy_id on DISCONNECTED. It exits, with 0,
 * after COUNT disconnections. A measurement of the library's own path,
 * without cmtime's thread hand-offs (TestSpeedCmtimeOneThread).
 *
 * usage: cmserve1 ADDR PORT COUNT */
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id;
	struct rdma_cm_event *ev;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
	int count, done = 0;

	if (argc != 4 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: cmserve1 ADDR PORT COUNT\n");
		return 2;
	}
	a.sin_port = htons(atoi(argv[2]));
	count = atoi(argv[3]);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&a) || rdma_listen(listen_id, 0)) {
		perror("cmserve1: listen");
		return 1;
	}
	while (done < count) {
		struct rdma_cm_id *id;
		enum rdma_cm_event_type type;
		if (rdma_get_cm_event(ch, &ev)) {
			perror("cmserve1: rdma_get_cm_event");
			return 1;
		}
		id = ev->id;
		type = ev->event;
		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			/* As cmtime's: librdmacm writes the CQs it made for the
			 * first QP back into qa, and later QPs share them. */
			if (rdma_create_qp(id, NULL, &qa) || rdma_accept(id, NULL)) {
				perror("cmserve1: accept");
				return 1;
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_disconnect(id);
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
			done++;
			break;
		default:
			break;
		}
	}
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	return 0;
}
