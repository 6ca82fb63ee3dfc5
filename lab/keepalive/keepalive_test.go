package keepalive

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/poll"
)

// The client keeps one connection while it is answered; when the server
// resets it, the client logs the reset and is answered on a new one.
func TestResetThenAnswered(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The third request is reset: the connection closed at once,
		// unread, with SO_LINGER 0.
		if served.Add(1) == 3 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			return
		}
		fmt.Fprintln(w, "pod-a")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	k := &Client{Host: "x", Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l.Addr().String())
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx, 10*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })

	var reset, answered Outcome
	poll.UntilNoted(t, poll.Patience, "a reset, then an answer on a new connection", func() (bool, string) {
		reset, answered = k.Log().ResetThenAnswered(1, "pod-a")
		return !answered.At.IsZero(), k.Log().String()
	})
	log := k.Log()
	if n := log.AnsweredBy("pod-a", 1); n != 2 {
		t.Errorf("%d answers on the first connection, want 2: %s", n, log)
	}
	if answered.Conn != 2 || reset.Err == "" {
		t.Errorf("reset %+v, then answered %+v", reset, answered)
	}
}

func TestLogString(t *testing.T) {
	l := Log{{Conn: 1, Answer: "a"}, {Conn: 1, Answer: "a"}, {Conn: 1, Err: "read: connection reset by peer", Reset: true}, {Conn: 2, Answer: "b"}}
	if got, want := l.String(), "conn 1: a ×2; conn 1: read: connection reset by peer ×1; conn 2: b ×1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := Log(nil).String(); got != "no request ended yet" {
		t.Errorf("empty: %q", got)
	}
}
