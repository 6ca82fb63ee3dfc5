package gossip

import (
	"bytes"
	"log"
	"maps"
	"testing"

	"github.com/hashicorp/memberlist"
)

// Each line memberlist v0.5.4 logs for a rejection is counted under its
// reason, and every line goes on unchanged; other lines count nothing.
func TestRejectionsCounted(t *testing.T) {
	lines := map[string]string{
		`2026/11/23 10:00:00 [ERR] memberlist: discarding packet with unacceptable label "billing/cache": 127.0.0.9:7946`:                 RejectLabel,
		`2026/11/23 10:00:00 [ERR] memberlist: discarding stream with unacceptable label "": from=127.0.0.9:50312`:                        RejectLabel,
		`2026/11/23 10:00:00 [WARN] memberlist: Got ping for unexpected node 'node-10-0-1-50' from=127.0.0.2:7946`:                        RejectUnexpectedNode,
		`2026/11/23 10:00:00 [WARN] memberlist: Got ping for unexpected node node-10-0-1-50 from=127.0.0.2:50311`:                         RejectUnexpectedNode,
		`2026/11/23 10:00:00 [ERR] memberlist: Conflicting address for cache-0. Mine: 127.0.0.5:7946 Theirs: 127.0.0.6:7946 Old state: 2`: RejectConflictingAddress,
		`2026/11/23 10:00:00 [WARN] memberlist: Refuting a suspect message (from: cache-1)`:                                               RejectRefutedDeath,
		`2026/11/23 10:00:00 [WARN] memberlist: Refuting a dead message (from: cache-1)`:                                                  RejectRefutedDeath,
		`2026/11/23 10:00:00 [WARN] memberlist: Refuting an alive message for 'cache-0' (127.0.0.6:7946) meta:([] VS [])`:                 RejectRefutedAlive,
		`2026/11/23 10:00:00 [DEBUG] memberlist: Stream connection from=127.0.0.1:50310`:                                                  "",
		`2026/11/23 10:00:00 [INFO] memberlist: Marking cache-3 as failed, suspect timeout reached (0 peer confirmations)`:                "",
	}
	var out bytes.Buffer
	c := memberlist.DefaultLANConfig()
	c.LogOutput = &out
	r := CountRejections(c)
	if c.LogOutput != r {
		t.Fatal("the log does not go through the counter")
	}
	lg := log.New(c.LogOutput, "", 0)
	want := map[string]uint64{}
	var all bytes.Buffer
	for l, reason := range lines {
		lg.Print(l)
		all.WriteString(l + "\n")
		if reason != "" {
			want[reason]++
		}
	}
	if got := r.Counts(); !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if out.Len() != all.Len() {
		t.Errorf("passed on %d bytes of %d", out.Len(), all.Len())
	}
	// Installed once: a second call returns the same counter.
	if CountRejections(c) != r {
		t.Error("a second CountRejections wrapped the counter again")
	}
	// A config with a Logger: its writer is wrapped.
	var out2 bytes.Buffer
	c2 := memberlist.DefaultLANConfig()
	c2.Logger = log.New(&out2, "", 0)
	r2 := CountRejections(c2)
	c2.Logger.Print(`[ERR] memberlist: discarding packet with unacceptable label "x": 127.0.0.9:7946`)
	if r2.Counts()[RejectLabel] != 1 || out2.Len() == 0 || CountRejections(c2) != r2 {
		t.Errorf("with a Logger: counts %v, passed on %q", r2.Counts(), out2.String())
	}
	if (&Rejections{counts: map[string]uint64{}}).Counts() != nil {
		t.Error("no rejection should read as nil: the list leaves the field out")
	}
}

// BenchmarkRejections is the counter's cost per log line, as memberlist
// logs one (log.Logger.Printf of a line with two values), against the
// same line logged to a writer that keeps nothing (the anchor).
func BenchmarkRejections(b *testing.B) {
	for _, counted := range []bool{false, true} {
		name := "logged"
		if counted {
			name = "logged-and-counted"
		}
		b.Run(name, func(b *testing.B) {
			c := memberlist.DefaultLANConfig()
			c.LogOutput = discard{}
			if counted {
				CountRejections(c)
			}
			lg := log.New(c.LogOutput, "", log.LstdFlags)
			b.ReportAllocs()
			for b.Loop() {
				lg.Printf("[DEBUG] memberlist: Stream connection %s %d", "from=127.0.0.1:50310", 7)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
