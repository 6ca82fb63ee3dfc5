package gossip

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	pkg "github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A real memberlist member serving its list through the package's
// handler, read as the controller reads it.
func TestEndpointReadsTheRealHandler(t *testing.T) {
	if MemberlistPath != pkg.Path || MemberlistKind != pkg.Kind {
		t.Fatalf("the reader asks %s for %s; the package serves %s at %s", MemberlistPath, MemberlistKind, pkg.Kind, pkg.Path)
	}
	cfg := pkg.DefaultPodConfig("web-0-1b4e28ba", "shop/cache")
	cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = "127.0.0.1", 0, 0
	cfg.LogOutput = io.Discard
	view := pkg.Watch(cfg)
	ml, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	mux := http.NewServeMux()
	mux.Handle(pkg.Path, view.Handler(ml))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	v, err := (&Endpoint{URL: srv.URL + pkg.Path}).Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.System != "memberlist" || v.Label != "shop/cache" || v.Local != "web-0-1b4e28ba" || v.From != srv.URL+pkg.Path {
		t.Errorf("view: system %q label %q local %q from %q", v.System, v.Label, v.Local, v.From)
	}
	if len(v.Members) != 1 || v.Members[0].Name != "web-0-1b4e28ba" || v.Members[0].Status != snapshot.MemberAlive || v.Members[0].Addr.String() != "127.0.0.1" {
		t.Errorf("members: %+v", v.Members)
	}
}

func TestEndpointErrors(t *testing.T) {
	serf, err := os.ReadFile("testdata/serf-members.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		wantErr string
	}{
		{"nothing mounted", http.StatusNotFound, "404 page not found\n", "404 Not Found: nothing is served there (is the ghostwatch/gossip package's handler mounted"},
		{"server error", http.StatusInternalServerError, "reading the member list: i/o timeout\nmore", "500 Internal Server Error: reading the member list: i/o timeout"},
		{"serf's members", http.StatusOK, string(serf), "is a serf member list, not the ghostwatch/gossip package's"},
		{"consul's members", http.StatusOK, "[]", "is not the ghostwatch/gossip package's member list (a JSON object): []"},
		{"not a member list", http.StatusOK, "<html>hello</html>", "is not the ghostwatch/gossip package's member list (a JSON object): <html>hello</html>"},
		{"empty", http.StatusOK, "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			v, err := (&Endpoint{URL: srv.URL + pkg.Path}).Members(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), srv.URL) {
				t.Fatalf("got %+v, %v; want an error naming the address and %q", v, err, tc.wantErr)
			}
		})
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	if _, err := (&Endpoint{URL: addr + pkg.Path}).Members(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v", err)
	}
	if _, err := (&Endpoint{URL: "10.0.0.1:7946"}).Members(context.Background()); err == nil || !strings.Contains(err.Error(), "want http://host:port/path") {
		t.Errorf("no scheme: %v", err)
	}
}

// The user information of a member list's address is printed nowhere:
// not in the view's From, not in an error.
func TestEndpointAddressRedacted(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, u := range []string{
		strings.Replace(srv.URL, "http://", "http://SECRETTOKEN@", 1) + pkg.Path,
		strings.Replace(closed.URL, "http://", "http://user:SECRETPW@", 1) + pkg.Path,
		"SECRETTOKEN@10.0.0.1:7946",
	} {
		_, err := (&Endpoint{URL: u}).Members(context.Background())
		if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("%s: %v", u, err)
		}
	}
}
