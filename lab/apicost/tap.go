package apicost

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// Phase is a stretch of a run whose counts are kept apart.
type Phase int

// The phases of a run.
const (
	// PhaseStart runs from the client's start until both clients have
	// synced and been quiet (Run says how that is decided).
	PhaseStart Phase = iota
	// PhaseChurn runs from there until the replacements are done and the
	// clients have been quiet again.
	PhaseChurn
	// PhaseAfter is what follows (the clients' shutdown): counted, never
	// reported.
	PhaseAfter
	numPhases
)

func (p Phase) String() string {
	switch p {
	case PhaseStart:
		return "start"
	case PhaseChurn:
		return "churn"
	case PhaseAfter:
		return "after"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// Counts are what a Tap counted in one phase.
type Counts struct {
	// Received and Sent are the bytes the client received from the API
	// server and sent to it, counted on the client's own TCP connections
	// to the tap: TLS records, HTTP/2 frames, headers and bodies.
	Received, Sent int64
	// UpstreamReceived and UpstreamSent are the same on the tap's
	// connections to the API server: a cross-check, as the tap relays the
	// answers' headers and bodies unchanged but frames them itself.
	UpstreamReceived, UpstreamSent int64
	// Connections are the client's connections opened in the phase.
	Connections int
	// ByKey counts requests and answers by Request.Key.
	ByKey map[string]*KeyCounts
	// Errors are the first few failures to relay or decode an answer.
	Errors []string
}

// KeyCounts are the requests of one Request.Key and what they received.
type KeyCounts struct {
	// Requests began in the phase.
	Requests int
	// Body is the answers' body bytes as the API server sent them
	// (compressed when it compressed them); Decoded the same after
	// decompression.
	Body, Decoded int64
	// Items are the objects of list answers, and the one object of any
	// other answer that carries one (get, create, update).
	Items int
	// Events are watch events by type: ADDED, MODIFIED, DELETED, BOOKMARK,
	// ERROR.
	Events map[string]int
}

// Objects are the objects received: list items, single objects and watch
// events that carry a change (not bookmarks, not errors).
func (k *KeyCounts) Objects() int {
	return k.Items + k.Events[string(watch.Added)] + k.Events[string(watch.Modified)] + k.Events[string(watch.Deleted)]
}

// maxErrors bounds Counts.Errors.
const maxErrors = 10

// ConnStats is one client connection to a tap.
type ConnStats struct {
	Opened   time.Time `json:"opened"`
	Closed   time.Time `json:"closed"`
	Received int64     `json:"receivedBytes"`
	Sent     int64     `json:"sentBytes"`
}

// Listener opens a listener where the client runs: a node's namespace
// (*netbed.Node) or the host.
type Listener interface {
	Listen(network, addr string) (net.Listener, error)
}

// Tap is a forwarder to the API server for one client, listening on
// 127.0.0.1 where the client runs. It terminates the client's TLS with the
// API server's own certificate, relays each request to the API server over
// a connection of its own and relays the answer back unchanged (headers,
// compressed bodies, watch streams flushed as they come); meanwhile it
// counts the bytes on the client's TCP connections and decodes each answer
// to count the objects in it. HTTP/2 is negotiated on both sides, as
// client-go and the API server do.
type Tap struct {
	name string
	url  string
	srv  *http.Server
	up   *http.Transport
	now  func() time.Time
	done chan struct{}

	mu      sync.Mutex
	phase   Phase
	counts  [numPhases]Counts
	pending int
	synced  int
	last    time.Time
	conns   []*connStats
}

// OpenTap opens a tap named name (for messages) on 127.0.0.1 at a free
// port where l listens, forwarding to the API server at upstream
// (https://127.0.0.1:port), whose certificate roots verify; it presents
// cert to the client.
func OpenTap(l Listener, name, upstream string, cert tls.Certificate, roots *x509.CertPool) (*Tap, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("tap %s: upstream %q: %w", name, upstream, err)
	}
	ln, err := l.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tap %s: %w", name, err)
	}
	t := &Tap{name: name, url: "https://" + ln.Addr().String(), now: time.Now, done: make(chan struct{})}
	t.last = t.now()
	for i := range t.counts {
		t.counts[i].ByKey = map[string]*KeyCounts{}
	}
	t.up = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, read: func(n int) { t.add(func(c *Counts) { c.UpstreamReceived += int64(n) }) },
				written: func(n int) { t.add(func(c *Counts) { c.UpstreamSent += int64(n) }) }}, nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true,
		// The client's Accept-Encoding is relayed as it is: the answer
		// reaches it as compressed as the API server made it.
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:      t.up,
		FlushInterval:  -1,
		ModifyResponse: t.modify,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, context.Canceled) {
				t.fail(fmt.Errorf("relaying %s %s: %w", r.Method, r.URL.Path, err))
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	t.srv = &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.serve(proxy, w, r) }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(t.done)
		_ = t.srv.ServeTLS(&countingListener{Listener: ln, tap: t}, "", "")
	}()
	return t, nil
}

// URL is where the client reaches the API server through the tap.
func (t *Tap) URL() string { return t.url }

// SetPhase starts phase: what is counted from now on is counted in it.
func (t *Tap) SetPhase(p Phase) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phase = p
}

// Counts returns a copy of what was counted in phase p.
func (t *Tap) Counts(p Phase) Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts[p]
	c.ByKey = map[string]*KeyCounts{}
	for k, v := range t.counts[p].ByKey {
		kc := *v
		kc.Events = map[string]int{}
		for e, n := range v.Events {
			kc.Events[e] = n
		}
		c.ByKey[k] = &kc
	}
	c.Errors = append([]string(nil), c.Errors...)
	return c
}

// Initial reports the client's initial lists: those under way (a list
// whose answer has not ended, a watch asked for its initial events that has
// not sent the bookmark ending them) and those done.
func (t *Tap) Initial() (pending, done int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending, t.synced
}

// LastActivity is when the client last did something the tap saw: began a
// request, received part of an answer that is not a watch, or a watch
// event that is not a bookmark. Bookmarks, which the API server sends on
// every watch about once a minute, and HTTP/2 pings are not activity.
func (t *Tap) LastActivity() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Connections returns the client's connections so far.
func (t *Tap) Connections() []ConnStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ConnStats, 0, len(t.conns))
	for _, c := range t.conns {
		out = append(out, ConnStats{Opened: c.opened, Closed: c.closed, Received: c.received.Load(), Sent: c.sent.Load()})
	}
	return out
}

// Close stops the tap: its listener and every connection, both sides.
func (t *Tap) Close() error {
	err := t.srv.Close()
	<-t.done
	t.up.CloseIdleConnections()
	return err
}

func (t *Tap) add(f func(*Counts)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.counts[t.phase])
}

func (t *Tap) fail(err error) {
	t.add(func(c *Counts) {
		if len(c.Errors) < maxErrors {
			c.Errors = append(c.Errors, err.Error())
		}
	})
}

// key is the counts of k in the current phase; t.mu is held.
func (t *Tap) key(k string) *KeyCounts {
	c := &t.counts[t.phase]
	kc := c.ByKey[k]
	if kc == nil {
		kc = &KeyCounts{Events: map[string]int{}}
		c.ByKey[k] = kc
	}
	return kc
}

// exchange is one request through the tap and its answer.
type exchange struct {
	tap     *Tap
	key     string
	watch   bool
	initial bool
	once    sync.Once
}

type exchangeKey struct{}

func (t *Tap) serve(proxy *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	req := ParseRequest(r.Method, r.URL)
	ex := &exchange{tap: t, key: req.Key(), watch: req.Verb == "watch"}
	ex.initial = req.Verb == "list" || (ex.watch && r.URL.Query().Get("sendInitialEvents") == "true")
	t.mu.Lock()
	t.key(ex.key).Requests++
	t.last = t.now()
	if ex.initial {
		t.pending++
	}
	t.mu.Unlock()
	// An answer that failed, or a watch that ended before its initial
	// events did, settles here.
	defer ex.settle()
	proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
}

// settle records the end of an initial list, once.
func (ex *exchange) settle() {
	if !ex.initial {
		return
	}
	ex.once.Do(func() {
		t := ex.tap
		t.mu.Lock()
		defer t.mu.Unlock()
		t.pending--
		t.synced++
		t.last = t.now()
	})
}

// errClosedEarly ends the decoding of an answer the client stopped
// reading (a watch it closed): the decoder's error is then no failure.
var errClosedEarly = errors.New("answer closed before its end")

// modify puts the decoder between the API server's answer and the client.
func (t *Tap) modify(resp *http.Response) error {
	ex, ok := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return nil
	}
	pr, pw := io.Pipe()
	b := &tappedBody{ReadCloser: resp.Body, ex: ex, pw: pw, done: make(chan struct{})}
	ct, gz, ok2xx := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding") == "gzip", resp.StatusCode/100 == 2
	go func() {
		defer close(b.done)
		// Whatever happens, the relay never waits for the decoder.
		defer func() { _, _ = io.Copy(io.Discard, pr) }()
		var err error
		switch {
		case !ok2xx:
			// A Status: no object.
		case ex.watch:
			err = decodeWatch(ex.decoded(pr, gz), ct, ex.event)
		default:
			var n int
			if n, err = countObjects(ex.decoded(pr, gz), ct); err == nil {
				ex.items(n)
			}
		}
		// A client that leaves (a watch it stops) cancels the answer:
		// no failure.
		if err != nil && !errors.Is(err, errClosedEarly) && !errors.Is(err, context.Canceled) {
			t.fail(fmt.Errorf("%s: %w", ex.key, err))
		}
		if !ex.watch {
			ex.settle()
		}
	}()
	resp.Body = b
	return nil
}

// decoded is r, decompressed when gz, counting the bytes read.
func (ex *exchange) decoded(r io.Reader, gz bool) io.Reader {
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return errReader{fmt.Errorf("gzip: %w", err)}
		}
		r = zr
	}
	return &countingReader{r: r, n: func(n int) {
		t := ex.tap
		t.mu.Lock()
		defer t.mu.Unlock()
		t.key(ex.key).Decoded += int64(n)
	}}
}

func (ex *exchange) items(n int) {
	t := ex.tap
	t.mu.Lock()
	defer t.mu.Unlock()
	t.key(ex.key).Items += n
}

func (ex *exchange) event(ev WatchEvent) {
	t := ex.tap
	t.mu.Lock()
	t.key(ex.key).Events[ev.Type]++
	if ev.Type != string(watch.Bookmark) {
		t.last = t.now()
	}
	t.mu.Unlock()
	if ev.InitialEnd {
		ex.settle()
	}
}

func (ex *exchange) body(n int) {
	t := ex.tap
	t.mu.Lock()
	defer t.mu.Unlock()
	t.key(ex.key).Body += int64(n)
	if !ex.watch {
		t.last = t.now()
	}
}

// tappedBody relays the API server's answer and copies it to the decoder.
type tappedBody struct {
	io.ReadCloser
	ex   *exchange
	pw   *io.PipeWriter
	done chan struct{}
}

func (b *tappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.ex.body(n)
		_, _ = b.pw.Write(p[:n])
	}
	switch {
	case errors.Is(err, io.EOF):
		b.pw.Close()
	case err != nil:
		b.pw.CloseWithError(err)
	}
	return n, err
}

// Close closes the answer and waits for the decoder to finish with it.
func (b *tappedBody) Close() error {
	err := b.ReadCloser.Close()
	b.pw.CloseWithError(errClosedEarly)
	<-b.done
	return err
}

type countingReader struct {
	r io.Reader
	n func(int)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n(n)
	}
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// countingListener counts each accepted connection's bytes as the
// client's.
type countingListener struct {
	net.Listener
	tap *Tap
}

type connStats struct {
	opened, closed time.Time
	received, sent atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := l.tap
	st := &connStats{opened: t.now()}
	t.mu.Lock()
	t.conns = append(t.conns, st)
	t.counts[t.phase].Connections++
	t.mu.Unlock()
	return &countingConn{Conn: c,
		read: func(n int) {
			st.sent.Add(int64(n))
			t.add(func(c *Counts) { c.Sent += int64(n) })
		},
		written: func(n int) {
			st.received.Add(int64(n))
			t.add(func(c *Counts) { c.Received += int64(n) })
		},
		closed: func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if st.closed.IsZero() {
				st.closed = t.now()
			}
		},
	}, nil
}

// countingConn reports the bytes read from and written to a connection.
type countingConn struct {
	net.Conn
	read, written func(int)
	closed        func()
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read(n)
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.written(n)
	}
	return n, err
}

func (c *countingConn) Close() error {
	if c.closed != nil {
		c.closed()
	}
	return c.Conn.Close()
}
