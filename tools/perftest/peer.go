package perftest

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/softroce/softroce/verbs"
)

// errPeerClosed ends a test whose peer closed the TCP side channel (it
// exited or was killed) while this side waited for traffic.
var errPeerClosed = errors.New("the peer closed the side channel during the test (killed?): no more traffic will come")

// peerWatch notices, while a test waits, that the peer's end of the
// side channel is gone (perftest itself waits forever). It peeks, never
// consuming the peer's next message. After the close it allows the
// transport's retry budget for the error completion that names the
// failure, then gives up with errPeerClosed.
type peerWatch struct {
	rc       syscall.RawConn
	next     time.Time
	closedAt time.Time
	grace    time.Duration
}

// peerCheckEvery is how often a waiting side looks at the side channel.
const peerCheckEvery = 50 * time.Millisecond

// retryBudget is how long an RC requester retries an unanswered request
// before the error completion, at most (verbs.RetryBudget: the engine's
// bound, backoff and jitter included); 0 for timeout 0 (infinite).
func retryBudget(timeout, retry int) time.Duration {
	return verbs.RetryBudget(uint8(timeout), uint8(retry))
}

func newPeerWatch(conn net.Conn, qpTimeout int) *peerWatch {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	// The budget of perftest's QPs (retry_cnt 7, timeout 14: at most
	// 1.68 s; a peer that never answers again is given up on after 1.0 to
	// 1.26 s), four times, plus 5 s for a loaded machine: the error
	// completion, when one is due, names the failure better.
	return &peerWatch{rc: rc, grace: 4*retryBudget(qpTimeout, 7) + 5*time.Second}
}

// check returns errPeerClosed once the peer is gone and the grace is over.
func (p *peerWatch) check() error {
	if p == nil {
		return nil
	}
	now := time.Now()
	if now.Before(p.next) {
		return nil
	}
	p.next = now.Add(peerCheckEvery)
	if p.closedAt.IsZero() {
		if !peerClosed(p.rc) {
			return nil
		}
		p.closedAt = now
	}
	if now.Sub(p.closedAt) > p.grace {
		return errPeerClosed
	}
	return nil
}
