package oob_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/softroce/softroce/cm/oob"
)

// The client side of ibv_rc_pingpong's exchange, as "softroce rc_pingpong
// SERVER" would run it against a real ibv_rc_pingpong server.
func ExampleClientExchange() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := net.Dial("tcp", fmt.Sprintf("10.77.0.11:%d", oob.DefaultPort))
	if err != nil {
		return
	}
	defer conn.Close()
	local := oob.PingpongDest{QPN: 0x11, PSN: 0x408b7e,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 12}}
	remote, err := oob.ClientExchange(ctx, conn, local)
	if err != nil {
		return
	}
	// Move the QP to RTR with remote.QPN, remote.PSN and remote.GID, then RTS.
	fmt.Printf("remote address: QPN %#06x, PSN %#06x\n", remote.QPN, remote.PSN)
}

// A whole ib_write_bw server session on an accepted socket.
func ExamplePerftestConn_Run() {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", oob.DefaultPort))
	if err != nil {
		return
	}
	defer ln.Close()
	conn, err := ln.Accept()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = oob.NewPerftestConn(conn, false).Run(ctx, &oob.PerftestSession{
		Test:  oob.WriteBW,
		Sys:   oob.SysData{CycleBuffer: 4096, CacheLineSize: 64},
		MTU:   3,
		Local: []oob.PerftestDest{{OutReads: 1, QPN: 0x19, PSN: 0xf725bc, RKey: 0x7b2, VAddr: 0x556b0c2a6000}},
		Connect: func(sys oob.SysData, mtu int, remote []oob.PerftestDest) error {
			return nil // move the QP to RTR/RTS towards remote[0]
		},
		Report: func(r oob.BWReport) {
			fmt.Printf(" %-10d %-10d %.2f %.2f %.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRateAvg)
		},
	})
	if err != nil {
		fmt.Println(err)
	}
}
