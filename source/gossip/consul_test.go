package gossip

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// consulAgent is a Consul-shaped agent: /v1/agent/members answers the
// seed's members to a request with token "reader", 403 otherwise, as an
// agent with ACLs enabled and default deny does; force-leave records what
// it was asked.
func consulAgent(t *testing.T, tls bool) (*httptest.Server, *[]string) {
	t.Helper()
	members, err := os.ReadFile("testdata/consul-api.json")
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent/members", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Consul-Token") != "reader" {
			http.Error(w, "Permission denied: token with AccessorID '00000000-0000-0000-0000-000000000002' lacks permission 'node:read' on \"consul-0\"", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(members)
	})
	mux.HandleFunc("GET /v1/agent/self", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"Config": {"Datacenter": "dc1", "NodeName": "consul-0"}}`))
	})
	mux.HandleFunc("PUT /v1/agent/force-leave/{node}", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.PathValue("node")+"?"+r.URL.RawQuery+" token="+r.Header.Get("X-Consul-Token"))
	})
	mux.HandleFunc("GET /v1/agent/broken", func(w http.ResponseWriter, r *http.Request) {})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return srv, &asked
}

func TestConsulMembers(t *testing.T) {
	srv, _ := consulAgent(t, false)
	c := &Consul{Addr: srv.URL, Token: "reader", AllowPlaintext: true}
	v, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.System != "consul" || v.Local != "consul-0" || len(v.Members) != 3 || v.Members[1].Status != snapshot.MemberFailed {
		t.Errorf("view %+v", v)
	}
	// host:port without a scheme is http, as consul's CLI takes it.
	c.Addr = strings.TrimPrefix(srv.URL, "http://")
	if _, err := c.Members(context.Background()); err != nil {
		t.Errorf("host:port: %v", err)
	}
}

func TestConsulACLDenied(t *testing.T) {
	srv, _ := consulAgent(t, false)
	for token, hint := range map[string]string{"": "set CONSUL_HTTP_TOKEN", "writer-only": "the token given lacks the permission"} {
		_, err := (&Consul{Addr: srv.URL, Token: token, AllowPlaintext: true}).Members(context.Background())
		if err == nil || !strings.Contains(err.Error(), "403 Forbidden (ACL denied: Permission denied") || !strings.Contains(err.Error(), hint) {
			t.Errorf("token %q: %v", token, err)
		}
	}
}

func TestConsulErrors(t *testing.T) {
	srv, _ := consulAgent(t, false)
	for _, tc := range []struct {
		addr, want string
	}{
		{"ftp://x", `consul address "ftp://x": want http://host:port`},
		{"http://127.0.0.1:1", "connection refused"},
		{srv.URL + "/nothing", "404 Not Found"},
	} {
		_, err := (&Consul{Addr: tc.addr, Token: "reader", AllowPlaintext: true}).Members(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.addr, err, tc.want)
		}
	}
}

func TestConsulTLS(t *testing.T) {
	srv, _ := consulAgent(t, true)
	// Without its CA the agent's certificate is refused.
	_, err := (&Consul{Addr: srv.URL, Token: "reader"}).Members(context.Background())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("no CA: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_CACERT", ca)
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("reader\n"), 0o600)
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", tokenFile)
	c, err := ConsulFromEnv(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Members(context.Background()); err != nil || len(v.Members) != 3 {
		t.Errorf("with CONSUL_CACERT and the token file: %v", err)
	}
	os.WriteFile(ca, []byte("not a certificate"), 0o644)
	if _, err := ConsulFromEnv(srv.URL); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}

func TestConsulForceLeave(t *testing.T) {
	srv, asked := consulAgent(t, false)
	if err := (&Consul{Addr: srv.URL, Token: "operator", AllowPlaintext: true}).ForceLeave(context.Background(), "node-abc-old"); err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 1 || (*asked)[0] != "node-abc-old?prune=1 token=operator" {
		t.Errorf("asked %q", *asked)
	}
}

// A token is not sent over http unless allowed: ConsulFromEnv allows it
// to a loopback address only, which it does not leave the host by.
func TestConsulTokenNotInClearText(t *testing.T) {
	srv, asked := consulAgent(t, false)
	err := (&Consul{Addr: srv.URL, Token: "operator"}).ForceLeave(context.Background(), "node-abc-old")
	if err == nil || !strings.Contains(err.Error(), "the ACL token would travel in clear text over http") || len(*asked) != 0 {
		t.Errorf("force-leave over http without leave: %v; agent asked %q", err, *asked)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "operator")
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	t.Setenv("CONSUL_CACERT", "")
	for addr, allowed := range map[string]bool{srv.URL: true, "localhost:8500": true, "http://10.0.0.5:8500": false, "[::1]:8500": true, "https://10.0.0.5:8501": false} {
		c, err := ConsulFromEnv(addr)
		if err != nil || c.AllowPlaintext != allowed {
			t.Errorf("ConsulFromEnv(%q): clear text allowed %v, %v; want %v", addr, c.AllowPlaintext, err, allowed)
		}
	}
}

// A redirect is not followed, and the token does not go where it points:
// not with a read (302), not with a force-leave (307 would send the PUT
// again).
func TestConsulRedirectNotFollowed(t *testing.T) {
	var got []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" token="+r.Header.Get("X-Consul-Token"))
	}))
	t.Cleanup(elsewhere.Close)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+r.URL.Path, code)
		}))
		c := &Consul{Addr: agent.URL, Token: "operator", AllowPlaintext: true}
		_, err := c.Members(context.Background())
		if err == nil || !strings.Contains(err.Error(), "not followed") {
			t.Errorf("%d: members: %v", code, err)
		}
		if err := c.ForceLeave(context.Background(), "node-abc-old"); err == nil || !strings.Contains(err.Error(), "not followed") {
			t.Errorf("%d: force-leave: %v", code, err)
		}
		agent.Close()
	}
	if len(got) != 0 {
		t.Errorf("the redirect's target was asked: %q", got)
	}
}

// The user information of the agent's address, a password or a token
// given as the user name, is printed nowhere: not in the view's From, not
// in an error, whether the agent answers or cannot be reached.
func TestConsulAddressRedacted(t *testing.T) {
	srv, _ := consulAgent(t, false)
	addr := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1)
	v, err := (&Consul{Addr: addr, Token: "reader", AllowPlaintext: true}).Members(context.Background())
	if err != nil || strings.Contains(v.From, "hunter2") || strings.Contains(v.From, "user") || !strings.Contains(v.From, "http://xxxxx@") {
		t.Errorf("From %q, %v", v.From, err)
	}
	for _, a := range []string{addr + "/nothing", "https://SECRETTOKEN@127.0.0.1:1", "http://user:SECRETPW@127.0.0.1:1", "SECRETTOKEN@127.0.0.1:1"} {
		_, err = (&Consul{Addr: strings.Replace(a, "hunter2", "SECRETPW", 1), Token: "reader", AllowPlaintext: true}).Members(context.Background())
		if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("%s: error %v", a, err)
		}
	}
}
