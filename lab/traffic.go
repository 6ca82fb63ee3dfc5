package lab

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"
)

// serve answers each request line on every connection with name: a tiny
// request/response protocol, so the client knows which pod answered.
func serve(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				if _, err := c.Write([]byte(name + "\n")); err != nil {
					return
				}
			}
		}()
	}
}

// serveDatagrams answers every datagram with name, until pc is closed.
func serveDatagrams(pc net.PacketConn, name string) {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(name+"\n"), from)
	}
}

// Outcome is one request the client made.
type Outcome struct {
	// Sent is when the request started; At when it was answered or failed.
	Sent time.Time
	At   time.Time
	// Pod is who answered; empty on failure.
	Pod string
	// Err is why the request failed.
	Err error
	// Local is the client's source address for the connection used.
	Local string
	// Reconnected is true when this request opened a new connection.
	Reconnected bool
}

// client is a keep-alive client with a connection pool of one: it sends a
// request every interval over the same TCP connection, waits timeout for the
// answer, and keeps the connection after a timeout (as pooled clients do;
// the seeds' clients never notice the pod is gone). Only when the kernel
// reports the connection broken (reset, refused, closed) does it dial anew.
type client struct {
	dial     func(ctx context.Context) (net.Conn, error)
	interval time.Duration
	timeout  time.Duration

	// failures, when set, is told every outcome as it is recorded.
	failures *failureLog

	mu       sync.Mutex
	outcomes []Outcome
	notify   chan struct{}
	// done is closed when run returns.
	done chan struct{}
}

func newClient(dial func(ctx context.Context) (net.Conn, error), interval, timeout time.Duration) *client {
	return &client{dial: dial, interval: interval, timeout: timeout, notify: make(chan struct{}, 1), done: make(chan struct{})}
}

// run sends requests until ctx ends, at most a request timeout later.
func (c *client) run(ctx context.Context) {
	defer close(c.done)
	var conn net.Conn
	var r *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		o := Outcome{Sent: time.Now()}
		if conn == nil {
			dctx, cancel := context.WithTimeout(ctx, c.timeout)
			nc, err := c.dial(dctx)
			cancel()
			if err == nil {
				conn, r = nc, bufio.NewReader(nc)
				o.Reconnected = true
			} else {
				o.Err = err
			}
		}
		if conn != nil {
			o.Local = conn.LocalAddr().String()
			conn.SetDeadline(time.Now().Add(c.timeout))
			_, err := conn.Write([]byte("GET\n"))
			var line string
			if err == nil {
				line, err = r.ReadString('\n')
			}
			switch {
			case err == nil:
				o.Pod = strings.TrimSpace(line)
			case isTimeout(err):
				// Keep the pooled connection: late answers are drained
				// by the next read.
				o.Err = err
			default:
				o.Err = err
				conn.Close()
				conn = nil
			}
		}
		o.At = time.Now()
		c.record(o)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *client) record(o Outcome) {
	c.mu.Lock()
	// Before the waiters hear of it: a failure is on the timeline before
	// what the scenario does about it.
	if c.failures != nil {
		c.failures.add(o)
	}
	c.outcomes = append(c.outcomes, o)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// stopFailures stops the failure log (see failureLog.stop) and returns
// every outcome it was told of.
func (c *client) stopFailures() []Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failures != nil {
		c.failures.stop()
	}
	return append([]Outcome(nil), c.outcomes...)
}

// since returns the outcomes from index i on.
func (c *client) since(i int) []Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i > len(c.outcomes) {
		i = len(c.outcomes)
	}
	return append([]Outcome(nil), c.outcomes[i:]...)
}

// waitFor blocks until cond holds for the outcomes recorded so far, or ctx
// or the deadline ends. It returns the outcomes it saw.
func (c *client) waitFor(ctx context.Context, deadline time.Duration, cond func([]Outcome) bool) ([]Outcome, error) {
	t := time.NewTimer(deadline)
	defer t.Stop()
	for {
		all := c.since(0)
		if cond(all) {
			return all, nil
		}
		select {
		case <-ctx.Done():
			return all, ctx.Err()
		case <-t.C:
			return all, errors.New("timed out")
		case <-c.notify:
		}
	}
}
