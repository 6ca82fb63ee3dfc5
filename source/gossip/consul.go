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

func (c *Consul) do(ctx context.Context, method, path string, query url.Values) ([]byte, error) {
	u, err := c.base()
	if err != nil {
		return nil, err
	}
	u = u.JoinPath(path)
	u.RawQuery = query.Encode()
	var header http.Header
	if c.Token != "" {
		if u.Scheme != "https" && !c.AllowPlaintext {
			return nil, fmt.Errorf("consul %s %s: the ACL token would travel in clear text over http: use https (or allow it: allowPlaintextCredentials in the controller's --gossip-clusters, --allow-plaintext-token for scan)", method, redact.URL(u))
		}
		header = http.Header{"X-Consul-Token": {c.Token}}
	}
	resp, body, err := request(ctx, c.Client, method, u, header, "consul "+method)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		hint := "set CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) to a token"
		if c.Token != "" {
			hint = "the token given lacks the permission"
		}
		return nil, fmt.Errorf("consul %s %s: %s (ACL denied: %s; %s)", method, redact.URL(u), resp.Status, strings.TrimSpace(string(body)), hint)
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("consul %s %s: %s: %s", method, redact.URL(u), resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// Members returns the agent's view of its LAN members
// (GET /v1/agent/members). Reading it needs node:read on every member
// (agent:read for the agent's own).
func (c *Consul) Members(ctx context.Context) (*snapshot.GossipView, error) {
	body, err := c.do(ctx, http.MethodGet, "/v1/agent/members", nil)
	if err != nil {
		return nil, err
	}
	v, err := parseConsulAPI(body)
	if err != nil {
		return nil, fmt.Errorf("consul %s/v1/agent/members:%w", redact.Addr(c.Addr), err)
	}
	if err := checkNames(v); err != nil {
		return nil, fmt.Errorf("consul %s/v1/agent/members: %w", redact.Addr(c.Addr), err)
	}
	v.From = redact.Addr(c.Addr)
	if self, err := c.do(ctx, http.MethodGet, "/v1/agent/self", nil); err == nil {
		v.Local = selfName(self)
	}
	return v, nil
}

// ForceLeave forces node out of the cluster, pruning it from the member
// list at once (PUT /v1/agent/force-leave/<node>?prune=1). It needs
// operator:write.
func (c *Consul) ForceLeave(ctx context.Context, node string) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/agent/force-leave/"+url.PathEscape(node), url.Values{"prune": {"1"}})
	return err
}

// selfName is the agent's node name in /v1/agent/self's answer, or "".
func selfName(body []byte) string {
	var self struct {
		Config struct{ NodeName string }
	}
	if json.Unmarshal(body, &self) != nil {
		return ""
	}
	return self.Config.NodeName
}

// request does one HTTP request with client (nil: one with a 10 s
// timeout) and reads the answer, at most maxFile bytes. Its errors start
// with what and the address.
func request(ctx context.Context, client *http.Client, method string, u *url.URL, header http.Header, what string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, redact.Error(fmt.Errorf("%s %s: %w", what, redact.URL(u), err), u.String())
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		loc := resp.Header.Get("Location")
		if l, err := url.Parse(loc); err == nil {
			loc = redact.URL(l)
		}
		return nil, nil, fmt.Errorf("%s %s: %s to %q: not followed: the request goes to the address given, and its credential with it, nowhere else", what, redact.URL(u), resp.Status, loc)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFile+1))
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("%s %s: reading the answer: %w", what, redact.URL(u), err)
	case len(body) > maxFile:
		return nil, nil, fmt.Errorf("%s %s: more than %d MiB", what, redact.URL(u), maxFile>>20)
	}
	return resp, body, nil
}
