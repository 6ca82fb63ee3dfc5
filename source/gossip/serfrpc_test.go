package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/serf/cmd/serf/command/agent"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// frames is values encoded one after another with h, as an agent writes a
// response header and its body.
func frames(t testing.TB, h *codec.MsgpackHandle, values ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := codec.NewEncoder(&b, h)
	for _, v := range values {
		if err := enc.Encode(v); err != nil {
			t.Fatalf("encoding %+v: %v", v, err)
		}
	}
	return b.Bytes()
}

// header is a response header as the agent writes it.
func header(seq uint64, errStr string) map[string]any {
	return map[string]any{"Seq": seq, "Error": errStr}
}

// membersReply is the agent's reply to members: its header and its body
// of agent.Member, the agent's own type.
func membersReply(t testing.TB, h *codec.MsgpackHandle, seq uint64, ms ...agent.Member) []byte {
	t.Helper()
	if ms == nil {
		ms = []agent.Member{}
	}
	return frames(t, h, header(seq, ""), map[string]any{"Members": ms})
}

// statsReply is the agent's reply to stats, naming it name.
func statsReply(t testing.TB, h *codec.MsgpackHandle, seq uint64, name string) []byte {
	t.Helper()
	return frames(t, h, header(seq, ""), map[string]map[string]string{"agent": {"name": name}, "runtime": {"goroutines": "12"}})
}

// fakeSerf serves a Serf agent's RPC on loopback as answer says: it reads
// each request, its header and the body of the commands that have one, and
// writes what answer returns for it; nil closes the connection, and so does
// a reply ending in hangUp once the rest is written.
func fakeSerf(t *testing.T, answer func(command string, seq uint64) []byte) string {
	t.Helper()
	return listen(t, func(c net.Conn) {
		defer c.Close()
		dec := codec.NewDecoder(c, serfMsgpack())
		for {
			var req struct {
				Command string
				Seq     uint64
			}
			if dec.Decode(&req) != nil {
				return
			}
			switch req.Command {
			case serfHandshake, serfAuth, serfForceLeave:
				var body map[string]any
				if dec.Decode(&body) != nil {
					return
				}
			}
			out := answer(req.Command, req.Seq)
			if out == nil {
				return
			}
			last, hang := bytes.CutSuffix(out, []byte(hangUp))
			if _, err := c.Write(last); err != nil || hang {
				return
			}
		}
	})
}

// hangUp ends a reply of fakeSerf's after which it closes the connection.
const hangUp = "\x00hang up\x00"

var (
	ip4   = net.ParseIP("10.0.1.10")
	alive = agent.Member{Name: "n1", Addr: ip4, Port: 7946, Tags: map[string]string{"role": "web"}, Status: "alive", ProtocolMin: 1, ProtocolMax: 5, ProtocolCur: 2, DelegateMin: 2, DelegateMax: 5, DelegateCur: 4}
)

// An agent's replies, in the encoding it writes today (str and bin) and in
// the raw one of agents built on older msgpack, read alike: strings and
// byte slices decode from either.
func TestSerfRPCReadsBothEncodings(t *testing.T) {
	failed := agent.Member{Name: "n2", Addr: net.ParseIP("fd00::2"), Port: 7947, Tags: map[string]string{}, Status: "failed"}
	want := &snapshot.GossipView{System: "serf", Local: "n1", Members: []snapshot.GossipMember{
		{Name: "n1", Addr: netip.MustParseAddr("10.0.1.10"), Port: 7946, Status: snapshot.MemberAlive, RawStatus: "alive", Tags: map[string]string{"role": "web"}},
		{Name: "n2", Addr: netip.MustParseAddr("fd00::2"), Port: 7947, Status: snapshot.MemberFailed, RawStatus: "failed", Tags: map[string]string{}},
	}}
	for name, h := range map[string]*codec.MsgpackHandle{"str and bin": serfMsgpack(), "raw": {}} {
		t.Run(name, func(t *testing.T) {
			addr := fakeSerf(t, func(command string, seq uint64) []byte {
				switch command {
				case serfHandshake:
					return frames(t, h, header(seq, ""))
				case serfMembers:
					return membersReply(t, h, seq, alive, failed)
				case serfStats:
					return statsReply(t, h, seq, "n1")
				}
				return frames(t, h, header(seq, "Unsupported command"))
			})
			v, err := (&Serf{Addr: addr, Timeout: 5 * time.Second}).Members(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want.From = addr
			if !reflect.DeepEqual(v, want) {
				t.Errorf("view\n%+v\nwant\n%+v", v, want)
			}
		})
	}
}

// A peer that answers what no Serf agent does gets an error saying what
// came, never a panic.
func TestSerfRPCMalformedReplies(t *testing.T) {
	h := serfMsgpack()
	for _, tc := range []struct {
		name string
		// members answers the members request; the handshake and
		// stats are answered as an agent does.
		members   func(seq uint64) []byte
		handshake func(seq uint64) []byte
		want      []string
	}{{
		name:      "garbage to the handshake",
		handshake: func(uint64) []byte { return []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") },
		want:      []string{": connecting: the reply is not a Serf agent's RPC: the response header: ", "a Serf agent's RPC address (serf agent -rpc-addr), not its gossip port or another service?"},
	}, {
		name:    "garbage to members",
		members: func(uint64) []byte { return []byte{0xc1, 0xc1, 0xc1} },
		want:    []string{": reading members: the reply is not a Serf agent's RPC: the response header: "},
	}, {
		name: "a truncated members reply",
		members: func(seq uint64) []byte {
			b := membersReply(t, h, seq, alive)
			return append(b[:len(b)-10], hangUp...)
		},
		want: []string{": the connection closed in the middle of a reply while reading members (the reply ends after ", " bytes, in the members reply: unexpected EOF): is "},
	}, {
		name: "a truncated header",
		members: func(seq uint64) []byte {
			return append(frames(t, h, header(seq, ""))[:3], hangUp...)
		},
		want: []string{"(the reply ends after 3 bytes, in the response header: unexpected EOF)"},
	}, {
		name:    "an error no agent gives",
		members: func(seq uint64) []byte { return frames(t, h, header(seq, "Frobnication failed")) },
		want:    []string{": reading members: the agent answered with an error: Frobnication failed; its log may say more"},
	}, {
		name:    "the answer to another request",
		members: func(seq uint64) []byte { return membersReply(t, h, seq+5, alive) },
		want:    []string{": reading members: the reply is not a Serf agent's RPC: it answers request 7, where request 2 (members) was asked"},
	}, {
		name: "a member with a 5-byte address",
		members: func(seq uint64) []byte {
			m := alive
			m.Addr = net.IP{10, 0, 0, 1, 9}
			return membersReply(t, h, seq, m)
		},
		want: []string{": members: members[0] (n1): an address of 5 bytes is not an IP address"},
	}, {
		name: "a member with an unknown status",
		members: func(seq uint64) []byte {
			m := alive
			m.Status = "zombie"
			return membersReply(t, h, seq, m)
		},
		want: []string{`: members: members[0] (n1): status "zombie" is none of alive, leaving, left, failed`},
	}, {
		name:    "a member listed twice",
		members: func(seq uint64) []byte { return membersReply(t, h, seq, alive, alive) },
		want:    []string{": members: ", "n1"},
	}, {
		name: "a port out of range",
		members: func(seq uint64) []byte {
			return frames(t, h, header(seq, ""), map[string]any{"Members": []map[string]any{{"Name": "n1", "Addr": []byte(ip4), "Port": 70000, "Status": "alive"}}})
		},
		want: []string{": reading members: the reply is not a Serf agent's RPC: the members reply: "},
	}, {
		name: "members as a string",
		members: func(seq uint64) []byte {
			return frames(t, h, header(seq, ""), map[string]any{"Members": "n1"})
		},
		want: []string{": reading members: the reply is not a Serf agent's RPC: the members reply: "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeSerf(t, func(command string, seq uint64) []byte {
				switch {
				case command == serfHandshake && tc.handshake != nil:
					return tc.handshake(seq)
				case command == serfHandshake:
					return frames(t, h, header(seq, ""))
				case command == serfMembers && tc.members != nil:
					return tc.members(seq)
				case command == serfStats:
					return statsReply(t, h, seq, "n1")
				}
				return nil
			})
			_, err := (&Serf{Addr: addr, Timeout: 5 * time.Second}).Members(context.Background())
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "serf agent "+addr+": ") && !strings.HasPrefix(err.Error(), "serf agent "+addr+" ") {
				t.Errorf("%v: does not name the agent", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant %q", err, w)
				}
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: a reply that came is not a deadline", err)
			}
		})
	}
}

// A reply longer than the client takes is refused as it arrives, not read
// into memory whole.
func TestSerfRPCReplyTooLarge(t *testing.T) {
	h := serfMsgpack()
	var members []map[string]any
	for i := range 100 {
		members = append(members, map[string]any{"Name": fmt.Sprintf("%04d", i) + strings.Repeat("x", 1000)})
	}
	big := map[string]any{"Members": members}
	data := append(frames(t, h, header(1, "")), frames(t, h, header(2, ""), big)...)
	c := newSerfRPC(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(data), io.Discard})
	c.maxReply = 64 << 10
	if err := c.handshake(); err != nil {
		t.Fatal(err)
	}
	_, err := c.members()
	if !errors.Is(err, errSerfReplyTooLarge) || !strings.Contains(err.Error(), "the members reply: the reply is too large: more than 65536 bytes") {
		t.Errorf("%v, want the reply too large", err)
	}
	if c.failed() {
		t.Error("a reply too large is not the connection failing")
	}
	if _, err := c.stats(); err == nil || !strings.Contains(err.Error(), "stats: the connection is unusable since an earlier call failed") {
		t.Errorf("a call after: %v", err)
	}
}

// hungPeer accepts connections and never answers; closed receives once
// for each connection the client closed.
func hungPeer(t *testing.T) (addr string, closed <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 16)
	addr = listen(t, func(c net.Conn) {
		defer c.Close()
		io.Copy(io.Discard, c)
		ch <- struct{}{}
	})
	return addr, ch
}

// An agent that accepts and never answers is abandoned as soon as the
// caller's context ends, long before the timeout: the call returns the
// context's error, and the connection is closed, not left waiting.
func TestSerfHungPeerAbandoned(t *testing.T) {
	addr, closed := hungPeer(t)
	for name, call := range map[string]func(context.Context, *Serf) error{
		"members": func(ctx context.Context, s *Serf) error {
			_, err := s.Members(ctx)
			return err
		},
		"force-leave": func(ctx context.Context, s *Serf) error { return s.ForceLeave(ctx, "n1") },
	} {
		t.Run(name, func(t *testing.T) {
			// The context's end, not the timeout, ended the call: its
			// error says so, however long a busy machine made it take.
			s := &Serf{Addr: addr, Timeout: poll.Patience}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			err := call(ctx, s)
			if took := time.Since(start); took >= s.Timeout {
				t.Errorf("returned %s after the call began: it waited its timeout out", took)
			}
			if !errors.Is(err, context.Canceled) || err.Error() != "serf agent "+addr+": context canceled" {
				t.Errorf("%v, want the context's cancellation", err)
			}
			select {
			case <-closed:
			case <-time.After(poll.Patience):
				t.Error("the connection to the hung peer is still open")
			}
		})
	}

	// The caller's deadline ends it the same way.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := (&Serf{Addr: addr, Timeout: poll.Patience}).Members(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer to the RPC handshake") {
		t.Errorf("%v, want no answer to the handshake", err)
	}
	select {
	case <-closed:
	case <-time.After(poll.Patience):
		t.Error("the connection to the hung peer is still open")
	}
}

// Each request the client sends is what the agent decodes: the header,
// then the body of the commands that have one, in Serf's field names.
func TestSerfRPCRequests(t *testing.T) {
	var sent bytes.Buffer
	h := serfMsgpack()
	replies := append(frames(t, h, header(1, ""), header(2, "")), membersReply(t, h, 3, alive)...)
	replies = append(replies, frames(t, h, header(4, ""))...)
	c := newSerfRPC(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(replies), &sent})
	if err := c.handshake(); err != nil {
		t.Fatal(err)
	}
	if err := c.auth("k"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.members(); err != nil {
		t.Fatal(err)
	}
	if err := c.forceLeavePrune("n1"); err != nil {
		t.Fatal(err)
	}
	type request struct {
		Command string
		Seq     uint64
	}
	dec := codec.NewDecoder(&sent, h)
	for _, want := range []struct {
		h    request
		body any
	}{
		{request{"handshake", 1}, map[string]any{"Version": int64(1)}},
		{request{"auth", 2}, map[string]any{"AuthKey": "k"}},
		{request{"members", 3}, nil},
		{request{"force-leave", 4}, map[string]any{"Node": "n1", "Prune": true}},
	} {
		var got request
		if err := dec.Decode(&got); err != nil || got != want.h {
			t.Fatalf("header %+v (%v), want %+v", got, err, want.h)
		}
		if want.body == nil {
			continue
		}
		var body map[string]any
		if err := dec.Decode(&body); err != nil {
			t.Fatal(err)
		}
		for k, v := range body {
			if s, ok := v.([]byte); ok {
				body[k] = string(s)
			}
		}
		if !reflect.DeepEqual(body, want.body) {
			t.Errorf("%s body %#v, want %#v", want.h.Command, body, want.body)
		}
	}
	if sent.Len() != 0 {
		t.Errorf("%d bytes more sent", sent.Len())
	}
}

// Whatever a peer answers, reading members or forcing one out ends in a
// view or an error naming the agent, never a panic.
func FuzzSerfReplies(f *testing.F) {
	h := serfMsgpack()
	hs := frames(f, h, header(1, ""))
	failed := agent.Member{Name: "n2", Addr: net.ParseIP("10.0.1.11").To4(), Port: 7946, Status: "failed"}
	f.Add(append(append(append([]byte{}, hs...), membersReply(f, h, 2, alive, failed)...), statsReply(f, h, 3, "n1")...))
	f.Add(append(append(append([]byte{}, hs...), membersReply(f, h, 2, failed)...), frames(f, h, header(3, ""))...))
	f.Add(append(append([]byte{}, hs...), frames(f, h, header(2, serfAuthRequired))...))
	f.Add(append(append([]byte{}, hs...), membersReply(f, &codec.MsgpackHandle{}, 2, alive)...))
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &Serf{Addr: "127.0.0.1:7373"}
		conn := func() *serfRPC {
			return newSerfRPC(struct {
				io.Reader
				io.Writer
			}{bytes.NewReader(data), io.Discard})
		}
		named := func(err error) {
			if err != nil && !strings.HasPrefix(err.Error(), "serf agent 127.0.0.1:7373") {
				t.Errorf("error %q does not name the agent", err)
			}
		}
		c := conn()
		err := s.open(c)
		var v *snapshot.GossipView
		if err == nil {
			v, err = s.view(c)
		}
		named(err)
		if err == nil {
			seen := map[string]bool{}
			for _, m := range v.Members {
				if seen[m.Name] || !m.Addr.IsValid() || m.Addr.Is4In6() {
					t.Errorf("member %+v", m)
				}
				seen[m.Name] = true
			}
		}
		c = conn()
		if err := s.open(c); err == nil {
			named(s.forceLeave(c, "n2"))
		}
	})
}

// A members reply beyond the bounds of a member list is refused before
// anything of it is decoded: an array that announces more than MaxMembers
// members (whose bytes never come), a member whose tags are more than a
// member holds, a name longer than any.
func TestSerfRPCReplyBeyondBounds(t *testing.T) {
	h := serfMsgpack()
	tooMany := []byte{0x81, 0xa7, 'M', 'e', 'm', 'b', 'e', 'r', 's', 0xdd, 0x00, 0x0f, 0x42, 0x40} // {"Members": [1,000,000 members...
	manyTags := map[string]string{}
	for i := range 300 {
		manyTags[fmt.Sprint(i)] = "v"
	}
	for _, tc := range []struct {
		name  string
		reply []byte
		want  string
	}{
		{"a million members announced", tooMany, "the members reply: beyond the bounds of a member list: more than 100000 members"},
		{"300 tags", frames(t, h, map[string]any{"Members": []map[string]any{{"Name": "a", "Tags": manyTags}}}), "a map of 300 entries, more than the 256 tags a member holds"},
		{"a long name", frames(t, h, map[string]any{"Members": []map[string]any{{"Name": strings.Repeat("x", 2000)}}}), "a string of 2000 bytes, more than the 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append(frames(t, h, header(1, "")), frames(t, h, header(2, ""))...)
			data = append(data, tc.reply...)
			c := newSerfRPC(struct {
				io.Reader
				io.Writer
			}{bytes.NewReader(data), io.Discard})
			if err := c.handshake(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.members(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}
