package conntrack

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The command a finding prints, run with the conntrack(8) users have,
// deletes exactly its entry: not the entry of another client port, not one
// of the same tuple translated to another backend, not one in another zone,
// for each protocol and family.
func TestDeleteCommandDeletesOnlyItsEntry(t *testing.T) {
	ns, c := withConntrackTool(t)
	flows := labFlows()
	create(t, c, flows)
	for i, f := range flows {
		cmd := f.DeleteCommand()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, strings.Fields(cmd)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		left := dumpAll(t, c)
		for j := range flows {
			_, there := left[keyOf(&flows[j])]
			if want := j > i; there != want {
				t.Errorf("after %s: entry %d (%s) present %t, want %t", cmd, j, &flows[j], there, want)
			}
		}
	}
}

// A command names the reply source: an entry of the same tuple now
// translated to another backend is not deleted.
func TestDeleteCommandKeepsAnEntryTranslatedElsewhere(t *testing.T) {
	ns, c := withConntrackTool(t)
	f := labFlows()[0]
	judged := f
	judged.Reply.Src = tuple("10.244.9.9", "10.244.1.50", 5432, 45678).Src // the ghost it was judged on
	create(t, c, []snapshot.Flow{f})
	cmd := judged.DeleteCommand()
	out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, strings.Fields(cmd)...)...).CombinedOutput()
	if _, there := dumpAll(t, c)[keyOf(&f)]; !there {
		t.Errorf("%s deleted the entry translated to %s: %s", cmd, f.Reply.Src, out)
	}
}

// withConntrackTool runs the test in a new network namespace with a
// conntrack socket in it, when conntrack(8) is installed.
func withConntrackTool(t *testing.T) (ns string, c *Conn) {
	t.Helper()
	t.Parallel()
	if _, err := exec.LookPath("conntrack"); err != nil {
		testenv.Unavailable(t, "conntrack(8) is not installed (apt-get install conntrack)")
	}
	ns = inNewNetns(t)
	return ns, open(t)
}
