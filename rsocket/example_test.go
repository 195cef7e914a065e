package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbs"
)

// Two devices on an in-memory link, an rsocket server on one and a client
// on the other. Over real networks, open the devices with verbs.OpenUDP;
// a C program using rsocket(3) can be either side.
func Example() {
	ea, eb, _ := pipe.New(pipe.Config{Addr: netip.MustParseAddrPort("10.9.0.1:4791")},
		pipe.Config{Addr: netip.MustParseAddrPort("10.9.0.2:4791")})
	da, _ := verbs.Open(ea, nil)
	db, _ := verbs.Open(eb, nil)
	defer da.Close()
	defer db.Close()
	aa, _ := cm.Attach(da, nil)
	ab, _ := cm.Attach(db, nil)
	defer aa.Close()
	defer ab.Close()

	l, err := rsocket.ListenAgent(ab, "10.9.0.2:7471", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client closes
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rsocket.DialAgent(ctx, aa, "10.9.0.2:7471", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.Write([]byte("hello over rsockets"))
	buf := make([]byte, 19)
	io.ReadFull(c, buf)
	fmt.Println(string(buf))
	// Output: hello over rsockets
}
