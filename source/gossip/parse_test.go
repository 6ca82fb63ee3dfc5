package gossip

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Seed 000's cluster in every format: a failed member and an alive one on
// 10.0.1.50.
func TestParseEveryFormat(t *testing.T) {
	for file, system := range map[string]string{
		"consul-members-detailed.txt": "consul",
		"consul-members.txt":          "consul",
		"consul-api.json":             "consul",
		"serf-members.json":           "serf",
		"memberlist.json":             "memberlist",
	} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("testdata", file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			v, err := Parse(path, data)
			if err != nil {
				t.Fatal(err)
			}
			if v.System != system || v.From != path || len(v.Members) != 3 {
				t.Fatalf("view %+v", v)
			}
			old, now := v.Members[1], v.Members[2]
			if old.Name != "node-abc-old" || old.Addr.String() != "10.0.1.50" || !old.Gone() ||
				now.Name != "node-xyz-new" || now.Addr != old.Addr || now.Status != snapshot.MemberAlive || now.Port == 0 {
				t.Errorf("members %+v", v.Members)
			}
			wantOld := map[string]string{"consul": snapshot.MemberFailed, "serf": snapshot.MemberFailed, "memberlist": snapshot.MemberDead}[system]
			if old.Status != wantOld {
				t.Errorf("old member %s, want %s", old.Status, wantOld)
			}
		})
	}
}

func TestParseDetails(t *testing.T) {
	data, _ := os.ReadFile("testdata/consul-members-detailed.txt")
	v, err := Parse("m.txt", data)
	if err != nil {
		t.Fatal(err)
	}
	if v.Members[0].Tags["role"] != "consul" || v.Members[0].Tags["segment"] != "<all>" || v.Members[0].Port != 8301 {
		t.Errorf("tags %v, port %d", v.Members[0].Tags, v.Members[0].Port)
	}
	data, _ = os.ReadFile("testdata/memberlist.json")
	v, err = Parse("m.json", data)
	if err != nil {
		t.Fatal(err)
	}
	if v.Label != "shop/cache" || v.Local != "consul-0" || v.Members[1].Incarnation != 5 || v.Members[1].Since.IsZero() ||
		v.Rejections["unexpected-node"] != 31 || v.Rejections["label"] != 4 || len(v.Rejections) != 2 {
		t.Errorf("view %+v", v)
	}
}

func TestParseErrorsNameTheFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "  \n", "x: empty: want consul members -detailed"},
		{"no header", "consul-0 10.0.0.1:8301 alive\n", "x:1: want consul members' header"},
		{"a bad status", "Node Address Status\nn1 10.0.0.1:8301 alive\nn2 10.0.0.2:8301 zombie\n", `x:3: n2: status "zombie"`},
		{"a bad address", "Node Address Status\nn1 10.0.0.1 alive\n", `x:2: n1: address "10.0.0.1": want ip:port`},
		{"a short line", "Node Address Status Tags\nn1 10.0.0.1:8301\n", "x:2: want a node, its address and status"},
		{"broken JSON", "[\n {\"Name\": \"a\",\n \"Addr\": }\n]", "x:3: invalid character"},
		{"a wrong type", "[\n {\"Name\": \"a\", \"Addr\": \"10.0.0.1\", \"Status\": \"alive\"}\n]", "x:2: json: cannot unmarshal string"},
		{"an unknown Consul status", `[{"Name": "a", "Addr": "10.0.0.1", "Status": 9}]`, "x: member 0 (a): Status 9 is none of"},
		{"a missing field", `[{"Name": "a", "Status": 1}]`, "x: member 0: want Name, Addr and Status"},
		{"an object of nothing known", `{"nodes": []}`, `x: a JSON object with neither "kind"`},
		{"another kind", `{"kind": "other", "members": []}`, `x: kind "other" is not`},
		{"another version", `{"kind": "ghostwatch.io/memberlist-members", "version": 2, "members": []}`, "x: version 2 of"},
		{"a negative rejection count", "{\"kind\": \"ghostwatch.io/memberlist-members\", \"version\": 1,\n \"rejections\": {\"label\": -1}}", "x:2: json: cannot unmarshal number -1"},
		{"a rejection count without a reason", `{"kind": "ghostwatch.io/memberlist-members", "version": 1, "rejections": {"": 3}}`, "x: rejections: a count without a reason"},
		{"a name twice", "Node Address Status\nn1 10.0.0.1:8301 alive\nn1 10.0.0.2:8301 alive\n", "x: member n1 is listed twice"},
		{"a serf address without port", `{"members": [{"name": "a", "addr": "10.0.0.1", "status": "alive"}]}`, `x: members[0] (a): addr "10.0.0.1": want ip:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x", []byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("Node Address Status\n"))
	f.Add([]byte(`{"members":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse("fuzz", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, m := range v.Members {
			if m.Name == "" || seen[m.Name] || !m.Addr.IsValid() || m.Addr.Is4In6() {
				t.Errorf("member %+v", m)
			}
			seen[m.Name] = true
			switch m.Status {
			case snapshot.MemberAlive, snapshot.MemberLeaving, snapshot.MemberLeft, snapshot.MemberFailed, snapshot.MemberSuspect, snapshot.MemberDead:
			default:
				t.Errorf("status %q", m.Status)
			}
		}
	})
}

// A member list that lists no member is no agent's view: a real one always
// lists the agent that gave it.
func TestParseRefusesAListOfNoMember(t *testing.T) {
	for _, in := range []string{"[]", `{"members": []}`, "Node  Address  Status  Type  Build  Protocol  DC  Partition  Segment\n"} {
		if _, err := Parse("members.json", []byte(in)); err == nil || !strings.Contains(err.Error(), "no member listed") {
			t.Errorf("%q: %v", in, err)
		}
	}
}
