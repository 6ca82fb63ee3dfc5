package gossip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Consul is a Consul agent's HTTP API, as consul's own CLI reaches it:
// CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) and
// CONSUL_CACERT.
type Consul struct {
	// Addr is the agent's address: http://host:8500, https://host:8501,
	// or host:port (http).
	Addr string
	// Token is the ACL token sent as X-Consul-Token; empty sends none. It
	// is sent to Addr only: never after a redirect, and over http only
	// when AllowPlaintext says so.
	Token string
	// AllowPlaintext lets Token travel over http. ConsulFromEnv sets it
	// for a loopback address, which the token does not leave the host by.
	AllowPlaintext bool
	// Client does the requests; nil means one with a 10 s timeout and,
	// for https, the system's roots (ConsulFromEnv adds CONSUL_CACERT's).
	Client *http.Client
}

// ConsulFromEnv returns the agent the environment names, as consul's CLI
// reads it; addr, when not empty, overrides CONSUL_HTTP_ADDR.
func ConsulFromEnv(addr string) (*Consul, error) {
	c := &Consul{Addr: addr}
	if c.Addr == "" {
		c.Addr = os.Getenv("CONSUL_HTTP_ADDR")
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8500"
	}
	if u, err := c.base(); err == nil {
		if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.IsLoopback() || u.Hostname() == "localhost" {
			c.AllowPlaintext = true
		}
	}
	c.Token = os.Getenv("CONSUL_HTTP_TOKEN")
	if f := os.Getenv("CONSUL_HTTP_TOKEN_FILE"); c.Token == "" && f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("CONSUL_HTTP_TOKEN_FILE: %w", err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	if ca := os.Getenv("CONSUL_CACERT"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("CONSUL_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CONSUL_CACERT %s: no PEM certificate in it", ca)
		}
		c.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	return c, nil
}

func (c *Consul) base() (*url.URL, error) {
	a := c.Addr
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	u, err := url.Parse(a)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("consul address %q: want http://host:port or https://host:port", redact.Addr(c.Addr))
	}
	return u, nil
}

// do sends one request to the agent and hands the body of a 2xx answer to
// read (nil reads nothing), at most maxFile bytes of it.
func (c *Consul) do(ctx context.Context, method, path string, query url.Values, read func(body io.Reader) error) error {
	u, err := c.base()
	if err != nil {
		return err
	}
	u = u.JoinPath(path)
	u.RawQuery = query.Encode()
	var header http.Header
	if c.Token != "" {
		if u.Scheme != "https" && !c.AllowPlaintext {
			return fmt.Errorf("consul %s %s: the ACL token would travel in clear text over http: use https (or allow it: allowPlaintextCredentials in the controller's --gossip-clusters, --allow-plaintext-token for scan)", method, redact.URL(u))
		}
		header = http.Header{"X-Consul-Token": {c.Token}}
	}
	return request(ctx, c.Client, method, u, header, "consul "+method, func(resp *http.Response, body io.Reader) error {
		switch {
		case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
			hint := "set CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) to a token"
			if c.Token != "" {
				hint = "the token given lacks the permission"
			}
			return fmt.Errorf("consul %s %s: %s (ACL denied: %s; %s)", method, redact.URL(u), resp.Status, message(body), hint)
		case resp.StatusCode/100 != 2:
			return fmt.Errorf("consul %s %s: %s: %s", method, redact.URL(u), resp.Status, message(body))
		case read == nil:
			return nil
		}
		return read(body)
	})
}

// Members returns the agent's view of its LAN members
// (GET /v1/agent/members), decoded as it is read. Reading it needs
// node:read on every member (agent:read for the agent's own).
func (c *Consul) Members(ctx context.Context) (*snapshot.GossipView, error) {
	var v *snapshot.GossipView
	err := c.do(ctx, http.MethodGet, "/v1/agent/members", nil, func(body io.Reader) (err error) {
		if v, err = parseConsulAPI(body); err != nil {
			return fmt.Errorf("consul %s/v1/agent/members:%w", redact.Addr(c.Addr), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkNames(v); err != nil {
		return nil, fmt.Errorf("consul %s/v1/agent/members: %w", redact.Addr(c.Addr), err)
	}
	v.From = redact.Addr(c.Addr)
	_ = c.do(ctx, http.MethodGet, "/v1/agent/self", nil, func(body io.Reader) error {
		v.Local = selfName(io.LimitReader(body, maxSelf))
		return nil
	})
	return v, nil
}

// maxSelf bounds what is read of /v1/agent/self's answer (tens of KB) for
// the agent's name.
const maxSelf = 4 << 20

// ForceLeave forces node out of the cluster, pruning it from the member
// list at once (PUT /v1/agent/force-leave/<node>?prune=1). It needs
// operator:write.
func (c *Consul) ForceLeave(ctx context.Context, node string) error {
	return c.do(ctx, http.MethodPut, "/v1/agent/force-leave/"+url.PathEscape(node), url.Values{"prune": {"1"}}, nil)
}

// selfName is the agent's node name in /v1/agent/self's answer, or "".
func selfName(body io.Reader) string {
	var self struct {
		Config struct{ NodeName string }
	}
	if json.NewDecoder(body).Decode(&self) != nil {
		return ""
	}
	return self.Config.NodeName
}

// request does one HTTP request with client (nil: one with a 10 s
// timeout), reads the answer's body, at most maxFile bytes, and hands the
// answer to read. Its errors start with what and the address.
func request(ctx context.Context, client *http.Client, method string, u *url.URL, header http.Header, what string, read func(resp *http.Response, body io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return redact.Error(err, u.String())
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	// A redirect is never followed: the request's credential (Consul's
	// X-Consul-Token, which Go's client does not strip on a redirect to
	// another host) goes to the address given and nowhere else, and a
	// force-leave is not sent twice.
	noRedirect := *client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return redact.Error(fmt.Errorf("%s %s: %w", what, redact.URL(u), err), u.String())
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		loc := resp.Header.Get("Location")
		if l, err := url.Parse(loc); err == nil {
			loc = redact.URL(l)
		}
		return fmt.Errorf("%s %s: %s to %q: not followed: the request goes to the address given, and its credential with it, nowhere else", what, redact.URL(u), resp.Status, loc)
	}
	// The answer is read whole, within the client's timeout, before it is
	// decoded: decoding a list of 100,000 members takes seconds of CPU,
	// which a throttled process must not spend against the timeout. It
	// is held in chunks, each let go once decoded.
	body, err := slurp(&bounded{r: resp.Body, left: maxFile, what: "the answer"})
	if err != nil {
		return redact.Error(fmt.Errorf("%s %s: reading the answer: %w", what, redact.URL(u), err), u.String())
	}
	if err := read(resp, body); err != nil {
		return redact.Error(err, u.String())
	}
	return nil
}

// chunks is a text held in pieces of at most chunkSize bytes, read once:
// each piece is let go once read, so that what decodes it can grow as
// the text shrinks.
type chunks struct {
	pieces [][]byte
}

// chunkSize is the size of the pieces slurp reads into.
const chunkSize = 1 << 20

// slurp reads r to its end into chunks: no buffer is grown and copied,
// as io.ReadAll's is, to hold it.
func slurp(r io.Reader) (*chunks, error) {
	c := &chunks{}
	for {
		piece := make([]byte, chunkSize)
		n, err := io.ReadFull(r, piece)
		if n > 0 {
			c.pieces = append(c.pieces, piece[:n])
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return c, nil
		case err != nil:
			return nil, err
		}
	}
}

func (c *chunks) Read(p []byte) (int, error) {
	for len(c.pieces) > 0 && len(c.pieces[0]) == 0 {
		c.pieces[0] = nil
		c.pieces = c.pieces[1:]
	}
	if len(c.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.pieces[0])
	c.pieces[0] = c.pieces[0][n:]
	return n, nil
}

// bounded reads at most left bytes of r; reading past them is an error
// that says what is more than maxFile.
type bounded struct {
	r    io.Reader
	left int64
	what string
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more says whether anything is past the bound.
		var one [1]byte
		if n, _ := io.ReadFull(b.r, one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%s is more than %d MiB: more than a member list of %d members", b.what, maxFile>>20, MaxMembers)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// message is the start of an error answer's body, to quote in an error.
func message(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
	return strings.TrimSpace(string(b))
}
