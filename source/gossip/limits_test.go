package gossip

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// consulMembers writes a /v1/agent/members answer of n members, each with
// tags tags.
func consulMembers(n, tags int) []byte {
	var b bytes.Buffer
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"Name":"node-%07d","Addr":"10.%d.%d.%d","Port":8301,"Status":1,"Tags":{`, i, i>>16&255, i>>8&255, i&255)
		for j := range tags {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"k%d":"v"`, j)
		}
		b.WriteString("}}")
	}
	b.WriteString("]")
	return b.Bytes()
}

// A list beyond the bounds of a member list is refused, naming the bound,
// in every format: more than MaxMembers members, a member with more than
// maxTags tags, a field longer than maxField.
func TestParseBounds(t *testing.T) {
	long := strings.Repeat("x", maxField+1)
	var text, serf, memberlist bytes.Buffer
	text.WriteString("Node Address Status\n")
	serf.WriteString(`{"members": [`)
	memberlist.WriteString(`{"kind": "ghostwatch.io/memberlist-members", "version": 1, "members": [`)
	for i := range MaxMembers + 1 {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&text, "n%d 10.0.0.1:8301 alive\n", i)
		fmt.Fprintf(&serf, `%s{"name":"n%d","addr":"10.0.0.1:7946","status":"alive"}`, sep, i)
		fmt.Fprintf(&memberlist, `%s{"name":"n%d","addr":"10.0.0.1","state":"alive"}`, sep, i)
	}
	serf.WriteString("]}")
	memberlist.WriteString("]}")
	manyTags := `Node Address Status Tags` + "\n" + `n1 10.0.0.1:8301 alive ` + strings.Repeat("k=v,", maxTags) + "k=v\n"
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"consul's API, too many members", consulMembers(MaxMembers+1, 0), "x: more than 100000 members"},
		{"consul members, too many members", text.Bytes(), "x:100002: more than 100000 members"},
		{"serf members, too many members", serf.Bytes(), "x: more than 100000 members"},
		{"memberlist, too many members", memberlist.Bytes(), "x: more than 100000 members"},
		{"consul's API, too many tags", consulMembers(1, maxTags+1), "x: member 0: tags: more than 256"},
		{"consul members, too many tags", []byte(manyTags), "x:2: n1: tags: more than 256"},
		{"serf members, too many tags", []byte(`{"members": [{"name":"a","addr":"10.0.0.1:7946","status":"alive","tags":{` + strings.Repeat(`"k":"v",`, 300) + `"k":"v"}}]}`), "x: members[0]: tags: more than 256"},
		{"a long name", []byte(`[{"Name":"` + long + `","Addr":"10.0.0.1","Status":1}]`), "x: member 0: " + long[:64] + "...: name of 1025 bytes: more than 1024"},
		{"a long tag", []byte(`[{"Name":"a","Addr":"10.0.0.1","Status":1,"Tags":{"k":"` + long + `"}}]`), "x: member 0: tags: k: tag value of 1025 bytes"},
		{"a long meta", []byte(`{"kind": "ghostwatch.io/memberlist-members", "version": 1, "members": [{"name":"a","addr":"10.0.0.1","state":"alive","meta":"` + strings.Repeat("QUFB", 400) + `"}]}`), "x: members[0] (a): meta of 1200 bytes: more than 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x", tc.in)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %.300v\nwant %q", err, tc.want)
			}
		})
	}
	// At the bounds, a list reads.
	if v, err := Parse("x", consulMembers(3, maxTags)); err != nil || len(v.Members) != 3 || len(v.Members[2].Tags) != maxTags {
		t.Errorf("%v", err)
	}
}

// Saved views beyond the bounds of member lists are refused before they
// are decoded.
func TestReadViewsBounds(t *testing.T) {
	var many bytes.Buffer
	many.WriteString(`{"Views": [{"System": "consul", "Members": [`)
	for i := range MaxMembers + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString("{}")
	}
	many.WriteString("]}]}")
	var views bytes.Buffer
	views.WriteString(`{"Views": [`)
	for v := range 5 {
		if v > 0 {
			views.WriteString(",")
		}
		views.WriteString(`{"Members": [` + strings.Repeat("{},", MaxMembers-1) + `{}]}`)
	}
	views.WriteString("]}")
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a view of too many members", many.String(), "gossip.json: more than 100000 members"},
		{"too many members in all", views.String(), "gossip.json: more than 400000 members in all the views"},
		{"a long string", `{"Views": [{"From": "` + strings.Repeat("x", 70<<10) + `"}]}`, "gossip.json: a string of more than 64 KiB"},
		{"too many tags", `{"Views": [{"Members": [{"Tags": {` + strings.Repeat(`"k":"v",`, 300) + `"k":"v"}}]}]}`, "gossip.json: an object of more than 256 keys"},
		{"broken", `{"Views": [}`, "gossip.json:1: invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadViews("gossip.json", []byte(tc.in)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%.200v, want %q", err, tc.want)
			}
		})
	}
	g, err := ReadViews("gossip.json", []byte(`{"Views": [{"System": "consul", "Members": [{"Name": "a", "Tags": {"role": "node"}}]}]}`))
	if err != nil || len(g.Views) != 1 || g.Views[0].Members[0].Tags["role"] != "node" {
		t.Errorf("%+v, %v", g, err)
	}
}

// One member, or one field beside the members, longer than maxValue of
// text is refused before it is held whole.
func TestParseBoundsAValue(t *testing.T) {
	big := strings.Repeat(" ", maxValue)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a member", `[{"Name":"a","Addr":"10.0.0.1","Status":1` + big + `}]`, "x: member 0: more than 1 MiB of text"},
		{"a field", `{"kind": "ghostwatch.io/memberlist-members", "label": "` + strings.Repeat("x", maxValue) + `"}`, "x: more than 1 MiB of text"},
	} {
		if _, err := Parse("x", []byte(tc.in)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %.200v, want %q", tc.name, err, tc.want)
		}
	}
}
