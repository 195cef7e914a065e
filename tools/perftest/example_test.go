package perftest_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/tools/perftest"
	"github.com/softroce/softroce/verbs"
)

// ExampleRun measures RDMA WRITE bandwidth between two devices of one
// program, as "softroce write_bw" and "softroce write_bw 127.0.0.2" would
// on two hosts, and prints the client's perftest report. Either side may
// instead be the stock ib_write_bw on another host.
func ExampleRun() {
	open := func(addr string) *verbs.Device {
		ep, err := udp.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), 4791))
		if err != nil {
			panic(err)
		}
		dev, err := verbs.Open(ep, &verbs.Config{Name: "rxe_" + addr})
		if err != nil {
			panic(err)
		}
		return dev
	}
	server, client := open("127.0.0.2"), open("127.0.0.3")
	defer server.Close()
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"-s", "65536", "-n", "1000", "-p", "18599"}
	done := make(chan error, 1)
	go func() { done <- perftest.Run(ctx, server, "write_bw", args, io.Discard) }()
	if err := perftest.Run(ctx, client, "write_bw", append(args, "127.0.0.2"), os.Stdout); err != nil {
		fmt.Println("client:", err)
	}
	if err := <-done; err != nil {
		fmt.Println("server:", err)
	}
}
