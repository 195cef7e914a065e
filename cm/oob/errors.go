package oob

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// Error reports a malformed or unexpected out-of-band message.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return "oob: " + e.Reason }

// Sentinel errors; the exchanges wrap them with the offending bytes.
var (
	ErrPingpongMsg = &Error{"malformed ibv_*_pingpong address message (want \"LLLL:QQQQQQ:PPPPPP:<32 hex GID>\" + NUL, 52 bytes)"}
	ErrPerftestMsg = &Error{"malformed perftest address message (want KEY_PRINT_FMT[_GID], 59 or 108 bytes)"}
	ErrDone        = &Error{"peer did not send \"done\" at the end of the exchange"}
	ErrRDMAInfo    = &Error{"rping buffer advertisement is not 16 bytes"}
	ErrVersion     = &Error{"perftest version string is not NUL-terminated text"}
	ErrMTU         = &Error{"perftest MTU message is not a decimal IB MTU enum"}
	ErrCount       = &Error{"number of local addresses exceeds the number of messages to exchange"}
)

// bind makes ctx govern conn's I/O while f runs: the context deadline becomes
// the socket deadline, and cancellation unblocks pending reads and writes.
// Errors caused by the context are reported as the context's error.
func bind(ctx context.Context, conn net.Conn, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, hasDL := ctx.Deadline()
	if err := conn.SetDeadline(dl); err != nil { // zero dl: no deadline
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	err := f()
	stopped := stop()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if hasDL && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
			return context.DeadlineExceeded
		}
		return err
	}
	if stopped {
		_ = conn.SetDeadline(time.Time{})
	}
	return nil
}
