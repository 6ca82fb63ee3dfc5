package redact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
)

func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:pw@host:8500":        "http://xxxxx@host:8500",
		"user:pw@host:8500":               "xxxxx@host:8500",
		"https://SECRETTOKEN@host:8501":   "https://xxxxx@host:8501",
		"https://a@b@host:8501/x?y=1":     "https://xxxxx@host:8501/x?y=1",
		"SECRETTOKEN@127.0.0.1:7373":      "xxxxx@127.0.0.1:7373",
		"host:8500":                       "host:8500",
		"http://host:8500/v1/agent":       "http://host:8500/v1/agent",
		"%zz:pw@host":                     "xxxxx@host",
		"http://us%40er:p%2Fw@host/path/": "http://xxxxx@host/path/",
	} {
		if got := Addr(in); got != want {
			t.Errorf("Addr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		in    string
		addrs []string
		want  string
	}{
		{`consul GET https://SECRETTOKEN@127.0.0.1:1/v1/agent/members: refused`, nil, `consul GET https://xxxxx@127.0.0.1:1/v1/agent/members: refused`},
		{`Get "http://user:***@127.0.0.1:1/x": dial tcp`, nil, `Get "http://xxxxx@127.0.0.1:1/x": dial tcp`},
		{`a https://t@h and b http://u:p@k, no user@host`, nil, `a https://xxxxx@h and b http://xxxxx@k, no user@host`},
		// A scheme-less address is found by what it carries.
		{`dial tcp: address SECRETTOKEN@127.0.0.1:7373: too many colons`, []string{"SECRETTOKEN@127.0.0.1:7373"}, `dial tcp: address xxxxx@127.0.0.1:7373: too many colons`},
		// The password alone, decoded, and as a URL escapes it.
		{`pw is s/cret, escaped s%2Fcret`, []string{"http://u:s%2Fcret@h"}, `pw is xxxxx, escaped xxxxx`},
		{`nothing to hide`, []string{"host:1"}, `nothing to hide`},
	} {
		if got := Text(tc.in, tc.addrs...); got != tc.want {
			t.Errorf("Text(%q, %q) =\n  %q, want\n  %q", tc.in, tc.addrs, got, tc.want)
		}
	}
}

// The error net/http returns quotes the URL with its user name (Go strips
// the password only); Error leaves neither in the text, nor in the
// *url.Error, and errors.Is and errors.As still see through it.
func TestErrorOfNetHTTP(t *testing.T) {
	for _, addr := range []string{"https://SECRETTOKEN@127.0.0.1:1/x", "http://user:SECRETPW@127.0.0.1:1/x"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = http.DefaultClient.Do(req)
		if err == nil {
			t.Fatalf("%s answered", addr)
		}
		err = Error(fmt.Errorf("asking: %w", err), addr)
		var ue *url.Error
		if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "xxxxx@127.0.0.1:1") ||
			!errors.As(err, &ue) || strings.Contains(ue.URL, "SECRET") || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v (url.Error %+v)", addr, err, ue)
		}
	}
	plain := errors.New("plain")
	if Error(plain) != plain || Error(nil) != nil {
		t.Error("an error with nothing to redact is not returned as it is")
	}
}
