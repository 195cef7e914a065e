package cm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/link/pipe"
	"github.com/softroce/softroce/verbs"
)

// Two devices joined by an in-memory link, one listening: Dial returns a
// connected RC QP, Accept its peer; the private data travels in the REQ
// and the REP.
func Example() {
	da, db, err := verbs.OpenPipe(pipe.Config{}, pipe.Config{}) // 10.0.0.1 and 10.0.0.2
	if err != nil {
		panic(err)
	}
	defer da.Close()
	defer db.Close()
	aa, _ := cm.Attach(da, nil)
	defer aa.Close()
	ab, _ := cm.Attach(db, nil)
	defer ab.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := cm.Listen("10.0.0.2:7174", &cm.Options{PrivateData: []byte("welcome")})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	accepted := make(chan *cm.Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		accepted <- c
	}()

	c, err := cm.Dial(ctx, "10.0.0.2:7174", &cm.Options{PrivateData: []byte("hello")})
	if err != nil {
		panic(err)
	}
	s := <-accepted
	fmt.Printf("client %v -> %v, QP %v, server said %q\n", c.LocalAddr().Addr(), c.RemoteAddr(), c.QP.State(), c.PeerPrivateData[:7])
	fmt.Printf("server QP %v, client said %q\n", s.QP.State(), s.PeerPrivateData[:5])

	c.Disconnect() // DREQ/DREP; both QPs go to ERR
	<-s.Disconnected()
	fmt.Println("disconnected")
	c.Close()
	s.Close()
	// Output:
	// client 10.0.0.1 -> 10.0.0.2:7174, QP RTS, server said "welcome"
	// server QP RTS, client said "hello"
	// disconnected
}
