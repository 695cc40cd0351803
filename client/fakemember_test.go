package client_test

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/watchnet"
)

// fakeMember listens on a loopback port until the test ends, speaking the
// client protocol's greeting: each connection it accepts (n counts them
// from 1) whose client greets is greeted back and handed to serve, with
// next reading the client's next request (skipping the announcement of
// its features and what does not decode; an error once the connection
// ends). The connection closes when serve returns.
func fakeMember(t *testing.T, serve func(n int32, c net.Conn, next func() (wire.Request, error))) string {
	t.Helper()
	var accepted atomic.Int32
	return watchnet.Accept(t, func(c net.Conn) {
		n := accepted.Add(1)
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			if wire.CheckGreeting(r) != nil {
				return
			}
			io.WriteString(c, wire.Greeting)
			serve(n, c, func() (wire.Request, error) {
				for {
					body, err := wire.ReadFrame(r)
					if err != nil {
						return wire.Request{}, err
					}
					req, err := wire.DecodeRequest(body)
					if err != nil || (req.Op == wire.OpStatus && req.Features != 0) {
						continue
					}
					return req, nil
				}
			})
		}()
	})
}
