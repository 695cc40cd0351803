// Package resp speaks just enough of Redis's protocol (RESP2) for the
// benchmark's and the chaos harness's lock recipes: commands as arrays of
// bulk strings, and simple, error, integer, bulk and array replies. It
// is not a Redis client library: no pooling, no pipelining, no retries.
package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Error is an error reply from the server (-ERR ..., -READONLY ...).
type Error struct{ Msg string }

func (e *Error) Error() string { return "redis: " + e.Msg }

// ErrNil is the reply of a nil bulk string or a nil array.
var ErrNil = errors.New("redis: nil reply")

// maxBulk bounds a bulk string or array this client reads: the recipes
// exchange a few bytes, so anything bigger is not a reply to them.
const maxBulk = 1 << 20

// Conn is one connection to a Redis server or Sentinel.
type Conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// Dial connects to addr.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Do sends one command and returns a simple, integer or bulk string reply
// as a string ("" for a nil bulk), or an error reply as an *Error.
func (c *Conn) Do(args ...string) (string, error) {
	v, err := c.Call(context.Background(), args...)
	if err != nil {
		if errors.Is(err, ErrNil) {
			return "", nil
		}
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redis: %s answered an array", args[0])
	}
	return s, nil
}

// Call sends one command within ctx's deadline and returns its reply: a
// string (simple, integer or bulk), a []any (array), ErrNil for a nil
// bulk or array, or an *Error. A connection whose call failed otherwise
// is in an unknown state: close it.
func (c *Conn) Call(ctx context.Context, args ...string) (any, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	c.nc.SetDeadline(dl)
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.read(0)
}

// read reads one reply; depth bounds nested arrays.
func (c *Conn) read(depth int) (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redis: short reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return nil, &Error{Msg: body}
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("redis: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, ErrNil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk || depth > 4 {
			return nil, fmt.Errorf("redis: bad array length %q", body)
		}
		if n < 0 {
			return nil, ErrNil
		}
		out := make([]any, 0, n)
		for range n {
			v, err := c.read(depth + 1)
			if err != nil && !errors.Is(err, ErrNil) {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
