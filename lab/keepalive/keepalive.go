// Package keepalive is the lab's keep-alive client, as the incident
// reports' clients are: it holds one connection and sends an HTTP request
// on it every interval, waits for each answer as long as it takes, and
// opens a new connection only when the one it holds fails. Seed 004's
// client outside the cluster and seed 001's pooled client in a pod
// (labpod client) both run it; its log says which connection each
// request went on, who answered, and how it failed.
package keepalive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is a keep-alive client. Dial opens a connection; Host is the
// requests' Host header.
type Client struct {
	Dial func(context.Context) (net.Conn, error)
	Host string
	// OnOutcome, when set, is called with each outcome as it is logged,
	// from Run's goroutine.
	OnOutcome func(Outcome)

	mu  sync.Mutex
	log []Outcome
}

// Outcome is one request's, or a failed dial's: the connection it went on
// (counted from 1), when it ended, and the answer (the body, trimmed) or
// the error. Reset says the error was a reset by the peer.
type Outcome struct {
	Conn   int       `json:"conn"`
	At     time.Time `json:"at"`
	Answer string    `json:"answer,omitempty"`
	Err    string    `json:"error,omitempty"`
	Reset  bool      `json:"reset,omitempty"`
}

// Run sends a request every interval until ctx ends, when it closes the
// connection it holds (ending a request that waits for its answer).
func (k *Client) Run(ctx context.Context, interval time.Duration) {
	var c net.Conn
	var br *bufio.Reader
	var unhook func() bool
	conns := 0
	hangUp := func() {
		unhook()
		c.Close()
		c = nil
	}
	defer func() {
		if c != nil {
			hangUp()
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if c == nil {
			var err error
			if c, err = k.Dial(ctx); err != nil {
				k.record(conns+1, "", err)
				c = nil
				continue
			}
			conns++
			br = bufio.NewReader(c)
			conn := c
			unhook = context.AfterFunc(ctx, func() { conn.Close() })
		}
		answer, err := k.exchange(c, br)
		k.record(conns, answer, err)
		if err != nil {
			hangUp()
		}
	}
}

// exchange sends one request on c and reads its answer.
func (k *Client) exchange(c net.Conn, br *bufio.Reader) (string, error) {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+k.Host+"\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

func (k *Client) record(conn int, answer string, err error) {
	o := Outcome{Conn: conn, At: time.Now(), Answer: answer}
	if err != nil {
		o.Err, o.Reset = err.Error(), errors.Is(err, syscall.ECONNRESET)
	}
	k.mu.Lock()
	k.log = append(k.log, o)
	k.mu.Unlock()
	if k.OnOutcome != nil {
		k.OnOutcome(o)
	}
}

// String says what happened: "conn 1: api-0" or "conn 1: read: connection
// reset by peer".
func (o Outcome) String() string {
	if o.Err != "" {
		return fmt.Sprintf("conn %d: %s", o.Conn, o.Err)
	}
	return fmt.Sprintf("conn %d: %s", o.Conn, o.Answer)
}

// Log is what happened so far, in order.
func (k *Client) Log() Log {
	k.mu.Lock()
	defer k.mu.Unlock()
	return Log(append([]Outcome(nil), k.log...))
}

// Log is a client's outcomes, in order.
type Log []Outcome

// AnsweredBy counts the answers from pod on connection conn.
func (l Log) AnsweredBy(pod string, conn int) int {
	n := 0
	for _, o := range l {
		if o.Conn == conn && o.Err == "" && o.Answer == pod {
			n++
		}
	}
	return n
}

// ResetThenAnswered finds connection conn's end by a reset, and the first
// answer from pod after it (zero Outcomes until each happened).
func (l Log) ResetThenAnswered(conn int, pod string) (reset, answered Outcome) {
	for _, o := range l {
		switch {
		case reset.At.IsZero() && o.Conn == conn && o.Reset:
			reset = o
		case !reset.At.IsZero() && o.Err == "" && o.Answer == pod:
			return reset, o
		}
	}
	return reset, Outcome{}
}

// String sums the log up, a run of like outcomes at a time: "conn 1:
// api-0 ×12; conn 1: read: connection reset by peer ×1; ...".
func (l Log) String() string {
	if len(l) == 0 {
		return "no request ended yet"
	}
	var b strings.Builder
	last, run := "", 0
	flush := func() {
		if run > 0 {
			fmt.Fprintf(&b, "%s ×%d; ", last, run)
		}
	}
	for _, o := range l {
		s := o.String()
		if s == last {
			run++
			continue
		}
		flush()
		last, run = s, 1
	}
	flush()
	return strings.TrimSuffix(b.String(), "; ")
}
