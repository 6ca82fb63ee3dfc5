package sink

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// forged is a gossip member's name that, printed raw, turns the terminal
// red and starts a line of its own that reads as a critical finding.
const forged = "x\x1b[31m\ncritical  forged"

// hostile is a report whose every string a cluster, a gossip member, a
// saved table or a bundle could fill is filled with s: names, messages,
// evidence the rules' details print, the commands, the causes and the
// sources' details.
func hostile(s string) *finding.Report {
	return &finding.Report{
		Findings: []finding.Finding{
			{Rule: rule.GossipGhostMemberID, Severity: finding.Critical,
				Message:  "consul member " + s + " is failed at 10.244.2.7, which pod shop/cache-4 now holds",
				Subject:  finding.Subject{IP: "10.244.2.7", Pod: "shop/cache-4"},
				Evidence: map[string]any{"system": "consul", "member": s, "reason": "member " + s + " is failed, and pod shop/cache-4 now holds its address"},
				Remove:   "consul force-leave -prune " + s},
			{Rule: rule.DuplicatePodIPID, Severity: finding.Warning,
				Message:  "10.244.1.9 is held by 2 pods",
				Subject:  finding.Subject{IP: "10.244.1.9", Pod: "shop/" + s, Node: "node-" + s},
				Evidence: map[string]any{"others": []string{"shop/web-0 " + s}}},
			{Rule: rule.StaleNATFlowID, Severity: finding.Warning,
				Message:  "tcp flow to ClusterIP web/api still goes to 10.244.3.47:8080",
				Subject:  finding.Subject{IP: "10.244.3.47", Service: "web/api", Flow: "tcp 10.244.1.50:40000 -> 10.96.0.10:80 " + s},
				Evidence: map[string]any{"backend": "10.244.3.47:8080 " + s, "state": "ESTABLISHED " + s},
				Remove:   "conntrack -D -p tcp --orig-src 10.244.1.50 " + s},
		},
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK},
			{Name: "gossip", Status: snapshot.StatusError, Detail: "consul agent answered " + s}},
		Skipped: []finding.Skipped{{Rule: rule.IPAMUnbookedIPID, Reason: "sources not ready (hostlocal: error: " + s + ")"}},
	}
}

// A gossip member named to forge a critical line, a pod and a node so
// named, a flow, its evidence and its command, a source's error and a
// skipped rule's cause, each holding the same sequence: the table shows
// every escape, on the line it belongs to, and holds no raw control
// character (golden file injection.table).
func TestTableEscapesWhatItDidNotWrite(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, hostile(forged+"\u202egnp.exe\t\r\u009b2J\xff"), rule.All(rule.Config{})); err != nil {
		t.Fatal(err)
	}
	golden(t, "injection.table", b.Bytes())
	got := b.String()
	if bad := layoutBreaks(got); bad != "" {
		t.Errorf("the table holds %s:\n%s", bad, got)
	}
	// One severity column per finding group, and no line of its own for
	// what the member's name holds.
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "critical  forged") {
			t.Errorf("a line of its own for the forged finding: %q", l)
		}
	}
	if !strings.Contains(got, `member x\x1b[31m\ncritical  forged\u202egnp.exe\t\r\u009b2J\xff is failed`) {
		t.Errorf("the member's name is not shown escaped:\n%s", got)
	}
	// JSON keeps the name as it is: its encoder escapes it.
	var j bytes.Buffer
	if err := JSON(&j, hostile(forged)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Findings []struct{ Evidence map[string]any }
	}
	if err := json.Unmarshal(j.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Findings[0].Evidence["member"] != forged {
		t.Errorf("JSON gives the member as %q, want %q", doc.Findings[0].Evidence["member"], forged)
	}
}

// Whatever the strings hold, the table is valid UTF-8 whose only
// character a terminal acts on is the newline of its own layout, and it
// has the lines it has for harmless strings: nothing a cluster writes
// adds one.
func FuzzTableEscapes(f *testing.F) {
	for _, s := range []string{"x", forged, "\u202e\u2066\u2069", "\r\n\t\x00\x7f", "\xff\xfe", "\u0085\u2028", "a\\nb"} {
		f.Add(s)
	}
	catalog := rule.All(rule.Config{})
	var plain bytes.Buffer
	if err := Table(&plain, hostile("x"), catalog); err != nil {
		f.Fatal(err)
	}
	lines := strings.Count(plain.String(), "\n")
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		if err := Table(&b, hostile(s), catalog); err != nil {
			t.Fatal(err)
		}
		got := b.String()
		if bad := layoutBreaks(got); bad != "" {
			t.Fatalf("for %q the table holds %s:\n%s", s, bad, got)
		}
		if n := strings.Count(got, "\n"); n != lines {
			t.Fatalf("for %q the table has %d lines, %d for a harmless name:\n%s", s, n, lines, got)
		}
	})
}

// layoutBreaks says what in a rendered table is not text a terminal shows
// as it is, the layout's newlines apart: "" when nothing.
func layoutBreaks(s string) string {
	if !utf8.ValidString(s) {
		return "bytes that are not UTF-8"
	}
	for _, r := range s {
		if r != '\n' && !strconv.IsPrint(r) {
			return "the character " + strconv.QuoteRune(r)
		}
	}
	return ""
}

// An Event's message is read by people too (kubectl describe): a member's
// name in it is escaped, on the one line.
func TestEventMessagesAreEscaped(t *testing.T) {
	rec := &fakeRecorder{}
	f := hostile(forged).Findings[0]
	f.Concerns = []finding.ObjectRef{{Kind: "Pod", Namespace: "shop", Name: "cache-4"}}
	(&Events{Recorder: rec, Node: "node-a"}).Finding(f)
	want := `Pod shop/cache-4 Warning GossipGhostMember node node-a: consul member x\x1b[31m\ncritical  forged is failed at 10.244.2.7, which pod shop/cache-4 now holds`
	if len(rec.events) != 1 || rec.events[0] != want {
		t.Errorf("events %q, want %q", rec.events, want)
	}
}
