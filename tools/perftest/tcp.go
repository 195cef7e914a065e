package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/softroce/softroce/cm/oob"
	"github.com/softroce/softroce/internal/cli"
	"github.com/softroce/softroce/internal/toolkit"
)

// tcp_bw and tcp_lat are the TCP baselines of write_bw and send_lat: the
// same kind of run over a plain TCP connection (kernel stack), printed in
// perftest's table, so that softroce's numbers can be read next to TCP's
// on the same machine.

func init() {
	cli.Register(&cli.Command{Name: "tcp_bw", Summary: "TCP bandwidth baseline in write_bw's format (server: no host; client: host)",
		Run: func(args []string, stdout, stderr io.Writer) int { return runTCPBase(false, args, stdout, stderr) }})
	cli.Register(&cli.Command{Name: "tcp_lat", Summary: "TCP ping-pong latency baseline in send_lat's format",
		Run: func(args []string, stdout, stderr io.Writer) int { return runTCPBase(true, args, stdout, stderr) }})
}

func runTCPBase(lat bool, args []string, stdout, stderr io.Writer) int {
	name := "tcp_bw"
	if lat {
		name = "tcp_lat"
	}
	size, iters, dur, margin, port := defSizeBW, defItersBW, 0, -1, oob.DefaultPort+1
	if lat {
		size, iters = defSizeLat, defItersLat
	}
	var bind string
	g := cli.Getopt{Prog: "softroce " + name}
	g.NumIn('s', "size", &size, 1, maxMsgSize)
	g.NumIn('n', "iters", &iters, 1, math.MaxInt32)
	g.NumIn('D', "duration", &dur, 0, math.MaxInt32)
	g.NumIn('f', "margin", &margin, 0, math.MaxInt32)
	g.NumIn('p', "port", &port, 0, 65535)
	g.Str('d', "bind", &bind)
	ops, code, ok := g.ParseArgs(args, stdout, stderr, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: softroce %s [-d BIND_IP] [-p PORT (default %d)] [-s SIZE] [-n ITERS] [-D SECONDS [-f MARGIN]] [HOST]\n", name, oob.DefaultPort+1)
	})
	if !ok {
		return code
	}
	switch {
	case len(ops) > 1:
		return cli.UsageErr(stderr, g.Prog, "one server host at most, got %q", ops)
	case lat && dur > 0:
		return cli.UsageErr(stderr, g.Prog, "tcp_lat has no -D")
	case lat && margin >= 0:
		return cli.UsageErr(stderr, g.Prog, "tcp_lat has no -D, so no -f")
	case !marginFits(dur, margin):
		return cli.UsageErr(stderr, g.Prog, "-f %d leaves no time to measure in -D %d (5 when -D is not given, as perftest checks): give -f below half of -D",
			margin, durationOrDefault(dur))
	case bind != "" && net.ParseIP(bind) == nil:
		return cli.UsageErr(stderr, g.Prog, "-d %q is not an IP address", bind)
	}
	if cli.ArgsOnly {
		return cli.ExitOK
	}
	var err error
	ctx, cancel := toolkit.SignalContext()
	defer cancel()
	var conn net.Conn
	if len(ops) == 0 {
		conn, err = accept(ctx, port)
	} else {
		d := net.Dialer{}
		if bind != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(bind)}
		}
		conn, err = ppDialWith(ctx, &d, ops[0], port, 10*time.Second)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	client := len(ops) == 1
	margin = effectiveMargin(dur, margin) // as write_bw's (perftest's)
	// The client tells the server how to run: size, iterations, duration,
	// margin.
	var hdr [24]byte
	if client {
		binary.BigEndian.PutUint64(hdr[:], uint64(size))
		binary.BigEndian.PutUint64(hdr[8:], uint64(iters))
		binary.BigEndian.PutUint32(hdr[16:], uint32(dur))
		binary.BigEndian.PutUint32(hdr[20:], uint32(max(margin, 0)))
		_, err = conn.Write(hdr[:])
	} else {
		_, err = io.ReadFull(conn, hdr[:])
		size, iters, dur = int(binary.BigEndian.Uint64(hdr[:])), int(binary.BigEndian.Uint64(hdr[8:])), int(binary.BigEndian.Uint32(hdr[16:]))
		margin = int(binary.BigEndian.Uint32(hdr[20:]))
		if size < 1 || size > maxMsgSize {
			err = fmt.Errorf("peer asked for size %d", size)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s                    TCP %s Test (kernel TCP over %s)\n%s", resultLine,
		map[bool]string{false: "BW", true: "Latency"}[lat], conn.LocalAddr(), resultLine)
	c := &config{tool: toolSpec{lat: lat, verb: verbSend}, iters: iters, duration: dur, margin: margin}
	c.printResultHeader(stdout)
	buf := make([]byte, size)
	var res sizeResult
	res.size = size
	if lat {
		res.lat, err = tcpBaseLat(conn, buf, iters, client)
	} else {
		res.bw, err = tcpBaseBW(conn, buf, c, client)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	c.printResult(stdout, res)
	fmt.Fprint(stdout, resultLine)
	return 0
}

func ppDialWith(ctx context.Context, d *net.Dialer, host string, port int, grace time.Duration) (net.Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	deadline := time.Now().Add(grace)
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) || !errors.Is(err, toolkit.ErrConnRefused) {
			return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tcpBW streams messages from the client to the server; the server answers
// one byte at the end so that the client's time covers delivery.
// With -D and a margin (c), each side counts what it wrote or read in the
// measured period, as write_bw does.
func tcpBaseBW(conn net.Conn, buf []byte, c *config, client bool) (oob.BWReport, error) {
	size := len(buf)
	dur := time.Duration(c.duration) * time.Second
	var one [1]byte
	report := func(n uint64, secs float64) oob.BWReport {
		return oob.BWReport{Size: uint64(size), Iters: n, BWAvg: float64(size) * float64(n) / secs / 0x100000,
			MsgRateAvg: float64(n) / secs / 1e6}
	}
	if client {
		start := time.Now()
		smp := c.sampler(start)
		n := 0
		for dur == 0 && n < c.iters || dur > 0 && time.Since(start) < dur {
			if _, err := conn.Write(buf); err != nil {
				return oob.BWReport{}, err
			}
			n++
			if smp != nil {
				smp.add(time.Now(), 1)
			}
		}
		if cw, ok := conn.(*net.TCPConn); ok {
			cw.CloseWrite()
		}
		if _, err := io.ReadFull(conn, one[:]); err != nil {
			return oob.BWReport{}, err
		}
		if smp != nil {
			return report(smp.result()), nil
		}
		return report(uint64(n), time.Since(start).Seconds()), nil
	}
	var total int64
	var start time.Time
	var smp *marginSampler
	big := make([]byte, 1<<20)
	for {
		k, err := conn.Read(big)
		if k > 0 && start.IsZero() {
			start = time.Now()
			smp = c.sampler(start)
		}
		total += int64(k)
		if smp != nil && k > 0 {
			smp.add(time.Now(), uint64(k)) // bytes, made messages below
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return oob.BWReport{}, err
		}
	}
	secs := time.Since(start).Seconds()
	conn.Write(one[:])
	if smp != nil {
		var got uint64
		got, secs = smp.result()
		total = int64(got)
	}
	return report(uint64(total/int64(size)), secs), nil
}

// tcpLat is a ping-pong of size-byte messages; both sides time their sends.
func tcpBaseLat(conn net.Conn, buf []byte, iters int, client bool) ([]time.Duration, error) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	t := make([]int64, iters) // ns since start: no pointers to scan (latClock)
	start := time.Now()
	for i := 0; i < iters; i++ {
		if !client || i > 0 {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return nil, err
			}
		}
		t[i] = int64(time.Since(start))
		if _, err := conn.Write(buf); err != nil {
			return nil, err
		}
	}
	if client {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return nil, err
		}
	}
	return intervals(t), nil
}
