package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// metaDelegate gives the member its node metadata.
type metaDelegate struct{ meta []byte }

func (d metaDelegate) NodeMeta(int) []byte                 { return d.meta }
func (d metaDelegate) NotifyMsg([]byte)                    {}
func (d metaDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d metaDelegate) LocalState(bool) []byte              { return []byte("user state the View reads past") }
func (d metaDelegate) MergeRemoteState(buf []byte, _ bool) {}

func TestHandler(t *testing.T) {
	start := time.Now().Add(-time.Second)
	a := startNode(t, "cache-a", "127.0.0.21", 0, testLabel, func(c *memberlist.Config) {
		c.Delegate = metaDelegate{meta: []byte("role=primary")}
	})
	b := startNode(t, "cache-b", "127.0.0.22", 0, testLabel, nil)
	b.join(t, a)
	poll.UntilNoted(t, poll.Patience, "cache-b alive in cache-a's list", stateOf(t, a, "cache-b", StateAlive))

	t.Run("GET: the member list, version 1", func(t *testing.T) {
		resp, err := http.Get(a.url + Path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %s: %s", resp.Status, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		var raw struct {
			Kind    string                       `json:"kind"`
			Version int                          `json:"version"`
			Label   string                       `json:"label"`
			Local   string                       `json:"local"`
			Members []map[string]json.RawMessage `json:"members"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("the list has fields outside schema version 1: %v\n%s", err, body)
		}
		if raw.Kind != "ghostwatch.io/memberlist-members" || raw.Version != 1 || raw.Label != testLabel || raw.Local != "cache-a" {
			t.Errorf("kind, version, label, local = %q, %d, %q, %q; want ghostwatch.io/memberlist-members, 1, %q, cache-a", raw.Kind, raw.Version, raw.Label, raw.Local, testLabel)
		}
		var names []string
		for _, m := range raw.Members {
			var name string
			_ = json.Unmarshal(m["name"], &name)
			names = append(names, name)
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			want := []string{"addr", "incarnation", "name", "port", "since", "state"}
			if name == "cache-a" {
				want = []string{"addr", "incarnation", "meta", "name", "port", "since", "state"}
			}
			if !reflect.DeepEqual(keys, want) {
				t.Errorf("member %s has fields %v, want %v (meta only when the member has some)", name, keys, want)
			}
		}
		if !reflect.DeepEqual(names, []string{"cache-a", "cache-b"}) {
			t.Errorf("members %v, want cache-a and cache-b, by name", names)
		}

		var l MemberList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		ma := l.member("cache-a")
		if ma.Addr != "127.0.0.21" || ma.Port != uint16(a.port()) || ma.State != StateAlive || ma.Incarnation == 0 {
			t.Errorf("cache-a = %+v, want alive at 127.0.0.21:%d with an incarnation", ma, a.port())
		}
		if got, want := `"`+base64.StdEncoding.EncodeToString([]byte("role=primary"))+`"`, string(raw.Members[0]["meta"]); got != want {
			t.Errorf("meta %s, want %s (base64)", want, got)
		}
		since, err := time.Parse(time.RFC3339, ma.Since)
		if err != nil || since.Before(start.Truncate(time.Second)) || since.After(time.Now()) {
			t.Errorf("cache-a since %q: want the RFC 3339 time it started, after %v (%v)", ma.Since, start, err)
		}

		// ghostwatch reads it.
		v, err := sourcegossip.Parse("cache-a"+Path, body)
		if err != nil {
			t.Fatalf("ghostwatch cannot read the list: %v", err)
		}
		if v.System != "memberlist" || v.Label != testLabel || v.Local != "cache-a" || len(v.Members) != 2 || v.Members[1].Status != snapshot.MemberAlive {
			t.Errorf("ghostwatch read %+v", v)
		}
	})

	t.Run("HEAD: the headers alone", func(t *testing.T) {
		resp, err := http.Head(a.url + Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("HEAD: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
		}
	})

	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		t.Run(method+": not allowed", func(t *testing.T) {
			req, _ := http.NewRequest(method, a.url+Path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s: %s, Allow %q; want 405 and Allow: GET, HEAD", method, resp.Status, resp.Header.Get("Allow"))
			}
		})
	}

	t.Run("a member shut down: 503 naming it", func(t *testing.T) {
		if err := b.ml.Shutdown(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(b.url + Path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "cache-b") {
			t.Errorf("%s: %s; want 503 naming cache-b", resp.Status, body)
		}
	})
}

// TestReadEncrypted reads the list of a cluster that encrypts its gossip
// and compresses it (DefaultLANConfig does), across a key rotation: the
// member answers with its primary key, the View decrypts with any.
func TestReadEncrypted(t *testing.T) {
	old := []byte("0123456789abcdef")
	cur := []byte("fedcba9876543210fedcba9876543210")
	keys := func(c *memberlist.Config) {
		kr, err := memberlist.NewKeyring([][]byte{old}, cur)
		if err != nil {
			t.Fatal(err)
		}
		c.Keyring = kr
	}
	a := startNode(t, "cache-a", "127.0.0.23", 0, testLabel, keys)
	b := startNode(t, "cache-b", "127.0.0.24", 0, testLabel, keys)
	b.join(t, a)
	poll.UntilNoted(t, poll.Patience, "cache-b alive in cache-a's list", stateOf(t, a, "cache-b", StateAlive))
	if lines := a.log.Lines("Stream connection"); len(lines) == 0 {
		t.Errorf("cache-a logged no stream connection: the list was not read over memberlist's push/pull")
	}
	for _, bad := range []string{"failed to receive", "Failed to read remote state", "unacceptable label"} {
		if lines := a.log.Lines(bad); len(lines) > 0 {
			t.Errorf("cache-a refused a read: %v", lines)
		}
	}

	// The read is encrypted and labelled indeed: without the keys, or
	// with another label, the member refuses it.
	for _, tc := range []struct {
		name, want string
		edit       func(c *memberlist.Config)
	}{
		{"no keys", "remote state is not encrypted", func(c *memberlist.Config) { c.Keyring = nil }},
		{"another label", "unacceptable label", func(c *memberlist.Config) { c.Label = "billing/cache" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *a.cfg
			tc.edit(&c)
			v := &View{cfg: &c, now: time.Now, events: map[string]event{}}
			ctx, cancel := context.WithTimeout(context.Background(), poll.Patience)
			defer cancel()
			if l, err := v.Read(ctx, a.ml); err == nil {
				t.Fatalf("read %v", l)
			}
			poll.UntilNoted(t, poll.Patience, "cache-a refusing the read", func() (bool, string) {
				return len(a.log.Lines(tc.want)) > 0, a.log.String()
			})
		})
	}
}

func TestReadPushPullRefusals(t *testing.T) {
	header := func(msgType byte) []byte {
		var b bytes.Buffer
		b.WriteByte(msgType)
		_ = codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(&errResp{Error: "too many pending push/pulls"})
		return b.Bytes()
	}
	kr, _ := memberlist.NewKeyring(nil, []byte("0123456789abcdef"))
	for _, tc := range []struct {
		name   string
		answer []byte
		cfg    *memberlist.Config
		want   string
	}{
		{"no answer", nil, &memberlist.Config{}, "no answer"},
		{"the member's error", header(errMsg), &memberlist.Config{}, "the member refused: too many pending push/pulls"},
		{"another message", header(pushPullMsg + 1), &memberlist.Config{}, "message type 7, not push/pull"},
		{"encrypted, no key", []byte{encryptMsg, 0, 0, 0, 1, 1}, &memberlist.Config{}, "has no key"},
		{"plain, keys required", header(pushPullMsg), &memberlist.Config{Keyring: kr, GossipVerifyIncoming: true}, "not encrypted"},
		{"encrypted with another key", append([]byte{encryptMsg, 0, 0, 0, 40}, make([]byte, 40)...), &memberlist.Config{Keyring: kr}, "no key of the keyring"},
		{"larger than memberlist allows", []byte{encryptMsg, 0xff, 0, 0, 0}, &memberlist.Config{Keyring: kr}, "more than memberlist's limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readPushPull(bytes.NewReader(tc.answer), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestViewForgetsGone: the View remembers when a member went for ten
// times GossipToTheDeadTime, ten minutes at least, however long nobody
// reads it; live members' joins stay.
func TestViewForgetsGone(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		deadTime time.Duration
		keep     time.Duration
	}{
		{15 * time.Second, 10 * time.Minute},
		{5 * time.Minute, 50 * time.Minute},
	} {
		c := &memberlist.Config{GossipToTheDeadTime: tc.deadTime}
		v := Watch(c)
		v.now = clk.Now
		v.NotifyJoin(&memberlist.Node{Name: "live"})
		v.NotifyJoin(&memberlist.Node{Name: "gone"})
		v.NotifyLeave(&memberlist.Node{Name: "gone"})
		clk.Advance(tc.keep)
		v.NotifyJoin(&memberlist.Node{Name: "other"})
		if _, ok := v.events["gone"]; !ok {
			t.Errorf("GossipToTheDeadTime %v: forgot a member gone %v ago", tc.deadTime, tc.keep)
		}
		clk.Advance(time.Second)
		v.NotifyJoin(&memberlist.Node{Name: "other"})
		if _, ok := v.events["gone"]; ok {
			t.Errorf("GossipToTheDeadTime %v: still remembers a member gone %v ago", tc.deadTime, tc.keep+time.Second)
		}
		if e, ok := v.events["live"]; !ok || e.gone {
			t.Errorf("GossipToTheDeadTime %v: the live member's join is gone: %+v", tc.deadTime, v.events)
		}
	}
}

// TestViewChainsEvents: the View passes every event on to the delegate it
// replaced.
func TestViewChainsEvents(t *testing.T) {
	got := &recordingEvents{}
	c := &memberlist.Config{Events: got}
	v := Watch(c)
	if c.Events != v {
		t.Fatalf("Watch did not install the View as the config's Events")
	}
	n := &memberlist.Node{Name: "cache-a"}
	v.NotifyJoin(n)
	v.NotifyUpdate(n)
	v.NotifyLeave(n)
	if want := []string{"join cache-a", "update cache-a", "leave cache-a"}; !reflect.DeepEqual(got.events, want) {
		t.Errorf("passed on %v, want %v", got.events, want)
	}
}

type recordingEvents struct{ events []string }

func (r *recordingEvents) NotifyJoin(n *memberlist.Node) { r.events = append(r.events, "join "+n.Name) }
func (r *recordingEvents) NotifyLeave(n *memberlist.Node) {
	r.events = append(r.events, "leave "+n.Name)
}
func (r *recordingEvents) NotifyUpdate(n *memberlist.Node) {
	r.events = append(r.events, "update "+n.Name)
}
