package gossip

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Endpoint is the member list a memberlist application serves through the
// ghostwatch/gossip package, at http://host:port/ghostwatch/members.
type Endpoint struct {
	// URL is the member list's address.
	URL string
	// Client does the request; nil means one with a 10 s timeout.
	Client *http.Client
}

// Members reads the member list. Anything but a 200 answer holding the
// package's member list (its kind says so) is an error: a pod that serves
// something else on that port is not read as an empty cluster.
func (e *Endpoint) Members(ctx context.Context) (*snapshot.GossipView, error) {
	u, err := url.Parse(e.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("member list address %q: want http://host:port/path", redact.Addr(e.URL))
	}
	var v *snapshot.GossipView
	err = request(ctx, e.Client, http.MethodGet, u, nil, "member list", func(resp *http.Response, body io.Reader) error {
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Errorf("member list %s: %s: nothing is served there (is the ghostwatch/gossip package's handler mounted at that path, on the port the ghostwatch.io/gossip-port annotation gives?)", redact.URL(u), resp.Status)
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("member list %s: %s: %s", redact.URL(u), resp.Status, firstLine([]byte(message(body))))
		}
		br := bufio.NewReaderSize(body, 64<<10)
		if first, _ := firstNonSpace(br); first != '{' && first != 0 {
			head, _ := br.Peek(256)
			return fmt.Errorf("member list %s: the answer is not the ghostwatch/gossip package's member list (a JSON object): %s", redact.URL(u), firstLine(bytes.TrimLeft(head, " \t\r\n")))
		}
		v, err = ParseReader(redact.URL(u), br)
		return err
	})
	if err != nil {
		return nil, err
	}
	if v.System != "memberlist" {
		return nil, fmt.Errorf("member list %s: the answer is a %s member list, not the ghostwatch/gossip package's", redact.URL(u), v.System)
	}
	return v, nil
}

// firstLine is the first line of an answer's body, at most 200 bytes, to
// quote in an error.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
