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
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s: empty: want consul members -detailed, the Consul API's /v1/agent/members, serf members -format=json, or the ghostwatch/gossip package's member list", name)
	}
	var v *snapshot.GossipView
	var err error
	switch trimmed[0] {
	case '[':
		v, err = parseConsulAPI(data)
	case '{':
		v, err = parseObject(data)
	default:
		v, err = parseConsulText(data)
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

// lineError is an error at a line of the input: its text is "N: ...", to
// follow the file's name and a colon.
func lineError(line int, format string, args ...any) error {
	return fmt.Errorf("%d: %s", line, fmt.Sprintf(format, args...))
}

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

func parseConsulAPI(data []byte) (*snapshot.GossipView, error) {
	var ms []struct {
		Name   *string
		Addr   *string
		Port   uint16
		Tags   map[string]string
		Status *int
	}
	if err := json.Unmarshal(data, &ms); err != nil {
		return nil, jsonError(data, err)
	}
	v := &snapshot.GossipView{System: "consul"}
	for i, m := range ms {
		where := fmt.Sprintf(" member %d", i)
		if m.Name == nil || m.Addr == nil || m.Status == nil {
			return nil, fmt.Errorf("%s: want Name, Addr and Status, as /v1/agent/members gives them", where)
		}
		st, ok := consulStatus[*m.Status]
		if !ok {
			return nil, fmt.Errorf("%s (%s): Status %d is none of Consul's 1 alive, 2 leaving, 3 left, 4 failed", where, *m.Name, *m.Status)
		}
		a, err := netip.ParseAddr(*m.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): Addr %q is not an IP address", where, *m.Name, *m.Addr)
		}
		v.Members = append(v.Members, snapshot.GossipMember{Name: *m.Name, Addr: a.Unmap(), Port: m.Port,
			Status: st, RawStatus: strconv.Itoa(*m.Status), Tags: m.Tags})
	}
	return v, nil
}

func parseObject(data []byte) (*snapshot.GossipView, error) {
	var head struct {
		Kind    string          `json:"kind"`
		Members json.RawMessage `json:"members"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, jsonError(data, err)
	}
	switch {
	case head.Kind == MemberlistKind:
		return parseMemberlist(data)
	case head.Kind != "":
		return nil, fmt.Errorf(" kind %q is not %s", head.Kind, MemberlistKind)
	case head.Members != nil:
		return parseSerf(data)
	}
	return nil, errors.New(` a JSON object with neither "kind": "` + MemberlistKind + `" nor "members": not serf members -format=json, nor the ghostwatch/gossip package's member list`)
}

func parseSerf(data []byte) (*snapshot.GossipView, error) {
	var c struct {
		Members []struct {
			Name   *string           `json:"name"`
			Addr   *string           `json:"addr"`
			Port   uint16            `json:"port"`
			Tags   map[string]string `json:"tags"`
			Status *string           `json:"status"`
		} `json:"members"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, jsonError(data, err)
	}
	v := &snapshot.GossipView{System: "serf"}
	for i, m := range c.Members {
		where := fmt.Sprintf(" members[%d]", i)
		if m.Name == nil || m.Addr == nil || m.Status == nil {
			return nil, fmt.Errorf("%s: want name, addr and status, as serf members -format=json gives them", where)
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

func parseMemberlist(data []byte) (*snapshot.GossipView, error) {
	var l struct {
		Version int    `json:"version"`
		Label   string `json:"label"`
		Local   string `json:"local"`
		Members []struct {
			Name        *string `json:"name"`
			Addr        *string `json:"addr"`
			Port        uint16  `json:"port"`
			State       *string `json:"state"`
			Incarnation uint32  `json:"incarnation"`
			Meta        []byte  `json:"meta"`
			Since       string  `json:"since"`
		} `json:"members"`
		Rejections map[string]uint64 `json:"rejections"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, jsonError(data, err)
	}
	if l.Version != 1 {
		return nil, fmt.Errorf(" version %d of %s; this ghostwatch reads version 1", l.Version, MemberlistKind)
	}
	v := &snapshot.GossipView{System: "memberlist", Label: l.Label, Local: l.Local}
	for reason := range l.Rejections {
		if reason == "" {
			return nil, fmt.Errorf(" rejections: a count without a reason")
		}
	}
	if len(l.Rejections) > 0 {
		v.Rejections = l.Rejections
	}
	for i, m := range l.Members {
		where := fmt.Sprintf(" members[%d]", i)
		if m.Name == nil || m.Addr == nil || m.State == nil {
			return nil, fmt.Errorf("%s: want name, addr and state", where)
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
				return nil, fmt.Errorf("%s (%s): since %q is not an RFC 3339 time", where, *m.Name, m.Since)
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
func parseConsulText(data []byte) (*snapshot.GossipView, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
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
					return nil, lineError(n, "want consul members' header (Node, Address, Status[, Tags]); got %q", line)
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
			return nil, lineError(n, "want a node, its address and status; got %q", line)
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
			for _, kv := range strings.Split(t, ",") {
				k, val, _ := strings.Cut(kv, "=")
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
