// Package gossip reads what gossip clusters say of their members: Consul's
// members (its HTTP API's /v1/agent/members, or consul members -detailed),
// Serf's (its agent's RPC, or serf members -format=json), and memberlist's
// through the member list the ghostwatch/gossip package serves. Each is
// read into one snapshot.GossipView, the view of the member it was asked.
package gossip

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// MemberlistKind is the kind of the member list the ghostwatch/gossip
// package serves.
const MemberlistKind = "ghostwatch.io/memberlist-members"

// MemberlistPath is where the ghostwatch/gossip package serves the member
// list, on the port the pod's ghostwatch.io/gossip-port annotation gives.
const MemberlistPath = "/ghostwatch/members"

// Parse reads one member list saved in name, its format detected from its
// content: a JSON array is Consul's /v1/agent/members; a JSON object is
// the ghostwatch/gossip package's member list (its kind says so) or serf
// members -format=json (a "members" array); text is consul members, with
// or without -detailed. Errors name the file and line.
func Parse(name string, data []byte) (*snapshot.GossipView, error) {
	return ParseReader(name, bytes.NewReader(data))
}

// ParseReader is Parse of what r reads, decoded as it is read, a member at
// a time, within the bounds of a member list (MaxMembers): what is held
// is the members, not the text.
func ParseReader(name string, r io.Reader) (*snapshot.GossipView, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	// A byte-order mark (what some editors save) is no part of the list.
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\ufeff")) {
		br.Discard(3)
	}
	first, err := firstNonSpace(br)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var v *snapshot.GossipView
	switch first {
	case 0:
		return nil, fmt.Errorf("%s: empty: want consul members -detailed, the Consul API's /v1/agent/members, serf members -format=json, or the ghostwatch/gossip package's member list", name)
	case '[':
		v, err = parseConsulAPI(br)
	case '{':
		v, err = parseObject(br)
	default:
		v, err = parseConsulText(br)
	}
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	v.From = name
	if err := checkNames(v); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// firstNonSpace returns the first byte that is not white space, without
// consuming it; 0 at the end of the input, or when the buffer holds only
// white space.
func firstNonSpace(br *bufio.Reader) (byte, error) {
	for n := 1; n <= br.Size(); n++ {
		b, err := br.Peek(n)
		if len(b) == n {
			if c := b[n-1]; c != ' ' && c != '\t' && c != '\r' && c != '\n' {
				return c, nil
			}
			continue
		}
		if err == io.EOF {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// lineError is an error at a line of the input: its text is "N: ...", to
// follow the file's name and a colon.
func lineError(line int, format string, args ...any) error {
	return &atLine{line: line, msg: fmt.Sprintf(format, args...)}
}

// atLine is an error at a line of the input.
type atLine struct {
	line int
	msg  string
}

func (e *atLine) Error() string { return fmt.Sprintf("%d: %s", e.line, e.msg) }

// jsonError places a JSON decoding error at its line.
func jsonError(data []byte, err error) error {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return fmt.Errorf(" %v", err)
	}
	return lineError(1+bytes.Count(data[:off], []byte("\n")), "%v", err)
}

// consulStatus maps Consul's serf status numbers (its API's Status).
var consulStatus = map[int]string{1: snapshot.MemberAlive, 2: snapshot.MemberLeaving, 3: snapshot.MemberLeft, 4: snapshot.MemberFailed}

// consulWords maps the words consul members and serf members print.
var consulWords = map[string]string{"alive": snapshot.MemberAlive, "leaving": snapshot.MemberLeaving,
	"left": snapshot.MemberLeft, "failed": snapshot.MemberFailed}

// memberlistWords maps the states the ghostwatch/gossip package serves.
var memberlistWords = map[string]string{"alive": snapshot.MemberAlive, "suspect": snapshot.MemberSuspect,
	"dead": snapshot.MemberDead, "left": snapshot.MemberLeft}

// consulMember is a member as /v1/agent/members gives it.
type consulMember struct {
	Name   *string
	Addr   *string
	Port   uint16
	Tags   tags
	Status *int
}

func parseConsulAPI(r io.Reader) (*snapshot.GossipView, error) {
	s := newJSONStream(r)
	v := &snapshot.GossipView{System: "consul"}
	err := arrayOf(s, func(i int) string { return fmt.Sprintf(" member %d", i) }, func(i int, m *consulMember) error {
		where := fmt.Sprintf(" member %d", i)
		if m.Name == nil || m.Addr == nil || m.Status == nil {
			return fmt.Errorf("%s: want Name, Addr and Status, as /v1/agent/members gives them", where)
		}
		if err := checkMember(*m.Name, *m.Addr, ""); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		st, ok := consulStatus[*m.Status]
		if !ok {
			return fmt.Errorf("%s (%s): Status %d is none of Consul's 1 alive, 2 leaving, 3 left, 4 failed", where, *m.Name, *m.Status)
		}
		a, err := netip.ParseAddr(*m.Addr)
		if err != nil {
			return fmt.Errorf("%s (%s): Addr %q is not an IP address", where, *m.Name, *m.Addr)
		}
		v.Members = append(v.Members, snapshot.GossipMember{Name: *m.Name, Addr: a.Unmap(), Port: m.Port,
			Status: st, RawStatus: strconv.Itoa(*m.Status), Tags: m.Tags})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	return v, nil
}

// checkMember refuses a member's name, address or status longer than
// maxField; what is refused is not quoted whole.
func checkMember(name, addr, status string) error {
	if err := checkField("name", name); err != nil {
		return fmt.Errorf("%s: %w", short(name), err)
	}
	if err := checkField("address", addr); err != nil {
		return fmt.Errorf("%s: %w", short(name), err)
	}
	if err := checkField("status", status); err != nil {
		return fmt.Errorf("%s: %w", short(name), err)
	}
	return nil
}

// objectMember is a member of serf members -format=json or of the
// ghostwatch/gossip package's member list: which one is known once the
// list's kind is read, which may follow the members.
type objectMember struct {
	Name *string `json:"name"`
	Addr *string `json:"addr"`
	Port uint16  `json:"port"`
	// Serf's.
	Tags   tags    `json:"tags"`
	Status *string `json:"status"`
	// memberlist's.
	State       *string `json:"state"`
	Incarnation uint32  `json:"incarnation"`
	Meta        []byte  `json:"meta"`
	Since       string  `json:"since"`
}

// parseObject reads a JSON object: the ghostwatch/gossip package's member
// list (its kind says so) or serf members -format=json (a "members"
// array), a field at a time and its members one at a time.
func parseObject(r io.Reader) (*snapshot.GossipView, error) {
	s := newJSONStream(r)
	if _, err := s.token(); err != nil { // {
		return nil, err
	}
	var (
		kind, label, local string
		version            int
		rejections         map[string]uint64
		members            []objectMember
		hasMembers         bool
	)
	for s.dec.More() {
		t, err := s.token()
		if err != nil {
			return nil, err
		}
		switch key, _ := t.(string); key {
		case "kind":
			err = s.decode(&kind)
		case "version":
			err = s.decode(&version)
		case "label":
			err = s.decode(&label)
		case "local":
			err = s.decode(&local)
		case "rejections":
			err = s.decode(&rejections)
			if err == nil && len(rejections) > maxTags {
				err = fmt.Errorf(" rejections: more than %d reasons", maxTags)
			}
		case "members":
			hasMembers = true
			err = arrayOf(s, func(i int) string { return fmt.Sprintf(" members[%d]", i) }, func(_ int, m *objectMember) error {
				members = append(members, *m)
				return nil
			})
		default:
			var skip json.RawMessage
			err = s.decode(&skip)
		}
		if err != nil {
			return nil, err
		}
	}
	if _, err := s.token(); err != nil { // }
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	for _, f := range []struct{ what, v string }{{"kind", kind}, {"label", label}, {"local", local}} {
		if err := checkField(f.what, f.v); err != nil {
			return nil, fmt.Errorf(" %w", err)
		}
	}
	switch {
	case kind == MemberlistKind:
		return memberlistView(version, label, local, rejections, members)
	case kind != "":
		return nil, fmt.Errorf(" kind %q is not %s", kind, MemberlistKind)
	case hasMembers:
		return serfJSONView(members)
	}
	return nil, errors.New(` a JSON object with neither "kind": "` + MemberlistKind + `" nor "members": not serf members -format=json, nor the ghostwatch/gossip package's member list`)
}

// serfJSONView maps the members of serf members -format=json.
func serfJSONView(ms []objectMember) (*snapshot.GossipView, error) {
	v := &snapshot.GossipView{System: "serf"}
	for i, m := range ms {
		where := fmt.Sprintf(" members[%d]", i)
		if m.Name == nil || m.Addr == nil || m.Status == nil {
			return nil, fmt.Errorf("%s: want name, addr and status, as serf members -format=json gives them", where)
		}
		if err := checkMember(*m.Name, *m.Addr, *m.Status); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		st, err := serfStatus(*m.Status)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %v", where, *m.Name, err)
		}
		a, port, err := hostPort(*m.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): addr %q: %v", where, *m.Name, *m.Addr, err)
		}
		if m.Port != 0 {
			port = m.Port
		}
		v.Members = append(v.Members, snapshot.GossipMember{Name: *m.Name, Addr: a, Port: port, Status: st, RawStatus: *m.Status, Tags: m.Tags})
	}
	return v, nil
}

// serfStatus maps a Serf member's status, as serf members and the agent's
// RPC say it.
func serfStatus(status string) (string, error) {
	st, ok := consulWords[status]
	if !ok {
		return "", fmt.Errorf("status %q is none of alive, leaving, left, failed", status)
	}
	return st, nil
}

// memberlistView maps the ghostwatch/gossip package's member list.
func memberlistView(version int, label, local string, rejections map[string]uint64, ms []objectMember) (*snapshot.GossipView, error) {
	if version != 1 {
		return nil, fmt.Errorf(" version %d of %s; this ghostwatch reads version 1", version, MemberlistKind)
	}
	v := &snapshot.GossipView{System: "memberlist", Label: label, Local: local}
	for reason := range rejections {
		if reason == "" {
			return nil, fmt.Errorf(" rejections: a count without a reason")
		}
		if err := checkField("rejection reason", reason); err != nil {
			return nil, fmt.Errorf(" rejections: %w", err)
		}
	}
	if len(rejections) > 0 {
		v.Rejections = rejections
	}
	for i, m := range ms {
		where := fmt.Sprintf(" members[%d]", i)
		if m.Name == nil || m.Addr == nil || m.State == nil {
			return nil, fmt.Errorf("%s: want name, addr and state", where)
		}
		if err := checkMember(*m.Name, *m.Addr, *m.State); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if len(m.Meta) > maxField {
			return nil, fmt.Errorf("%s (%s): meta of %d bytes: more than %d, which memberlist carries at most 512", where, *m.Name, len(m.Meta), maxField)
		}
		st, ok := memberlistWords[*m.State]
		if !ok {
			return nil, fmt.Errorf("%s (%s): state %q is none of alive, suspect, dead, left", where, *m.Name, *m.State)
		}
		a, err := netip.ParseAddr(*m.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): addr %q is not an IP address", where, *m.Name, *m.Addr)
		}
		mem := snapshot.GossipMember{Name: *m.Name, Addr: a.Unmap(), Port: m.Port, Status: st, RawStatus: *m.State, Incarnation: m.Incarnation}
		if m.Since != "" {
			t, err := time.Parse(time.RFC3339, m.Since)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): since %q is not an RFC 3339 time", where, *m.Name, short(m.Since))
			}
			mem.Since = t
		}
		v.Members = append(v.Members, mem)
	}
	return v, nil
}

// parseConsulText reads consul members' table: a header naming at least
// the Node, Address and Status columns (Tags with -detailed), then a
// member per line, its columns separated by blanks. Tags are k=v pairs
// separated by commas.
func parseConsulText(r io.Reader) (*snapshot.GossipView, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	v := &snapshot.GossipView{System: "consul"}
	var cols map[string]int
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if cols == nil {
			cols = map[string]int{}
			for i, c := range f {
				cols[c] = i
			}
			for _, want := range []string{"Node", "Address", "Status"} {
				if _, ok := cols[want]; !ok {
					return nil, lineError(n, "want consul members' header (Node, Address, Status[, Tags]); got %q", short(line))
				}
			}
			continue
		}
		get := func(c string) string {
			if i, ok := cols[c]; ok && i < len(f) {
				return f[i]
			}
			return ""
		}
		name, addr, status := get("Node"), get("Address"), get("Status")
		if name == "" || addr == "" || status == "" {
			return nil, lineError(n, "want a node, its address and status; got %q", short(line))
		}
		if len(v.Members) == MaxMembers {
			return nil, lineError(n, "%v", errTooManyMembers)
		}
		if err := checkMember(name, addr, status); err != nil {
			return nil, lineError(n, "%v", err)
		}
		st, ok := consulWords[status]
		if !ok {
			return nil, lineError(n, "%s: status %q is none of alive, leaving, left, failed", name, status)
		}
		a, port, err := hostPort(addr)
		if err != nil {
			return nil, lineError(n, "%s: address %q: %v", name, addr, err)
		}
		m := snapshot.GossipMember{Name: name, Addr: a, Port: port, Status: st, RawStatus: status}
		if t := get("Tags"); t != "" {
			m.Tags = map[string]string{}
			pairs := 0
			for kv := range strings.SplitSeq(t, ",") {
				if pairs++; pairs > maxTags {
					return nil, lineError(n, "%s: tags: more than %d, which no member's %d bytes of meta hold", name, maxTags, 512)
				}
				k, val, _ := strings.Cut(kv, "=")
				if err := checkField("tag key", k); err != nil {
					return nil, lineError(n, "%s: tags: %v", name, err)
				}
				if err := checkField("tag value", val); err != nil {
					return nil, lineError(n, "%s: tags: %s: %v", name, short(k), err)
				}
				m.Tags[k] = val
			}
		}
		v.Members = append(v.Members, m)
	}
	if err := sc.Err(); err != nil {
		return nil, lineError(n+1, "%v", err)
	}
	if cols == nil {
		return nil, lineError(n, "no header: want consul members' table")
	}
	return v, nil
}

// hostPort reads "ip:port" (IPv6 in brackets).
func hostPort(s string) (netip.Addr, uint16, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, 0, errors.New("want ip:port")
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%q is not an IP address", h)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port %q is not a number below 65536", p)
	}
	return a.Unmap(), uint16(port), nil
}

// checkNames refuses a view that lists one name twice: every system keys
// its members by name.
func checkNames(v *snapshot.GossipView) error {
	if len(v.Members) == 0 {
		return errors.New("no member listed: an agent's member list always lists the agent itself, so this is no agent's whole view (one not joined yet, or a capture that failed)")
	}
	seen := make(map[string]bool, len(v.Members))
	for _, m := range v.Members {
		if m.Name == "" {
			return errors.New("a member has an empty name")
		}
		if seen[m.Name] {
			return fmt.Errorf("member %s is listed twice: %s keys members by name, so this is not one member's view", m.Name, v.System)
		}
		seen[m.Name] = true
	}
	return nil
}
