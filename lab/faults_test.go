package lab

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// update makes TestRealFaults write docs/faults.md from what it measured.
var update = flag.Bool("update", false, "TestRealFaults: write docs/faults.md with the figures of this run")

// The fault matrix: each remedy played under each fault it can meet, on
// the real API server and kernel (TestRealFaults), published as
// docs/faults.md. A cell is one remedy under one fault; the cells of one
// fault share its injection, which TestRealFaults makes once.

// The remedies, as their flags name them.
const (
	remedyFlow   = "stale-nat-flow"
	remedyHost   = "hostlocal-reserve"
	remedyGossip = "gossip-force-leave"
)

// faultCell is one row of the matrix: what is injected and what
// ghostwatch must do. Did is what TestRealFaults asserts; the figures are
// measured.
type faultCell struct {
	// Fault names the fault (its phase in TestRealFaults), Remedy the
	// remedy's flag, Injected how the fault is made.
	Fault, Remedy, Injected, Did string
}

// The settings the matrix runs with, quoted by docs/faults.md: a grace
// period short enough for the suite, long enough that a fault held longer
// shows whether grace periods start over.
const (
	faultGrace         = "10s"
	faultAuditInterval = "5s"
)

// faultCells are the matrix's rows, in the order TestRealFaults plays
// them.
var faultCells = []faultCell{
	{"none (reference)", remedyFlow, "a pooled connection's backend pod deleted", "acted: the dead backend's flow deleted, nothing else"},
	{"none (reference)", remedyHost, "host-local's data directory wiped under three running pods", "acted: the three reservations written back, each for its pod's sandbox"},
	{"none (reference)", remedyGossip, "a Serf member's agent killed, its pod's address given to a new pod and member", "acted: the ghost member forced out, nothing else"},

	{"API server down", remedyFlow, "kube-apiserver stopped (SIGTERM) with a ghost pending, started again after the grace period", "not ready while down; deleted the ghost's flow a full grace period after it was back"},
	{"API server down", remedyHost, "the same, with host-local's directory wiped", "not ready while down; wrote the reservations back a full grace period after it was back"},
	{"API server down", remedyGossip, "the same, with a ghost member pending", "not ready while down; lost its Lease, and with it what proved the ghost: withheld it after, still reported"},

	{"API server hung", remedyFlow, "kube-apiserver paused (SIGSTOP) with a ghost pending, resumed (SIGCONT) after the grace period", "not ready while hung; deleted the ghost's flow a full grace period after it answered again"},
	{"API server hung", remedyHost, "the same, with host-local's directory wiped", "not ready while hung; wrote the reservations back a full grace period after it answered again"},
	{"API server hung", remedyGossip, "the same, with a ghost member pending", "stayed up, not ready while hung; lost its Lease: withheld the ghost after, still reported"},

	{"API server restarted", remedyFlow, "kube-apiserver stopped and started at once, a ghost pending", "acted on the ghost alone once its evidence was complete again"},
	{"API server restarted", remedyHost, "the same, with host-local's directory wiped", "acted on the wiped reservations alone once its evidence was complete again"},
	{"API server restarted", remedyGossip, "the same, with a ghost member pending", "forced the ghost out if the leader kept its Lease, withheld it if it lost it"},

	{"watch gap", remedyFlow, "the agent's connections to the API server cut (a relay closing each at once) while a backend was deleted and another backend's address went to a pod of another Service", "not ready while cut off; acted on nothing it could not re-check: once reconnected, deleted the dead backend's flow a grace period after, left the reused address's alone"},
	{"watch gap", remedyHost, "the agent's connections cut while the directory was wiped and one of its pods deleted", "not ready while cut off; its re-check refused what it could not read: once reconnected, wrote back the running pods' reservations, none for the deleted pod"},
	{"watch gap", remedyGossip, "both controller replicas' connections cut while a member died and its address went to a new pod", "not ready while cut; lost the Lease: withheld the ghost after, still reported"},

	{"clock skew ±2 min", remedyFlow, "live backends' startTime moved 2 min ahead and 2 min back, a ghost made", "deleted the ghost's flow alone; the live backends' flows kept"},
	{"clock skew ±2 min", remedyHost, "the pods' startTime moved 2 min ahead and back, the directory wiped", "acted: the reservations written back"},
	{"clock skew ±2 min", remedyGossip, "two members' agents killed while their own pods run on, the pods' startTime 2 min ahead of the controller's clock and 2 min behind", "not forced out: a pod's startTime proves nothing"},

	{"address shared with another pod", remedyFlow, "a dead backend's address reported by a pod of another node, another's by a hostNetwork pod", "left the flow to the address another pod reports alone until it went; deleted the one only a hostNetwork pod reports (a node's address names no pod)"},
	{"address shared with another pod", remedyHost, "two running pods' addresses reported by another pod and by a hostNetwork pod, the directory wiped", "refused the address another pod reports, wrote the others back (a hostNetwork pod holds its node's address, not a pod address); wrote it once no longer shared"},
	{"address shared with another pod", remedyGossip, "the address of the pod asked for the member list reported by a pod of another namespace, then by a hostNetwork pod, a ghost pending", "asked nothing of the shared address; forced the ghost out once the address was its pod's alone"},

	{"conntrack table full", remedyFlow, "the node's table filled to nf_conntrack_max with assured entries (new connections dropped), a ghost made", "acted: the ghost's flow deleted, nothing else"},
	{"conntrack table full", remedyHost, "the same, with host-local's directory wiped", "acted: the reservations written back"},

	{"lost netlink events", remedyFlow, "the agent stopped (SIGSTOP) while 40,000 entries were created and deleted, far more than its event socket holds, and a ghost made", "saw the overflow, so that its next audit read the whole table; deleted the ghost's flow alone"},

	{"dead backends over the budget", remedyFlow, "50 flows through one Service to 50 addresses no pod holds, past the budget of 20 dead backends a minute", "refused the batch whole, not ready and saying why; nothing deleted; ready once the flows were gone"},
	{"20,000 dead backends", remedyFlow, "20,000 flows through one Service to 20,000 addresses no pod holds", "judged them all in one pass and reported them as one finding, which no remedy acts on: nothing deleted; ready throughout"},

	{"Cilium impersonated", remedyFlow, "a process of uid 65534 answering Cilium's health check, kube-proxy's metrics unreachable, a ghost made", "judged the flow rules (the answer not believed) and deleted the ghost's flow"},

	{"named pipe in the store", remedyHost, "a named pipe in place of a reservation file, the rest wiped", "not judged, /readyz saying the ledger is unread; nothing written until the pipe was gone"},
	{"data directory linked out of the root", remedyHost, "host-local's data directory replaced by a symbolic link to a directory outside the host root", "not judged, /readyz saying why; nothing written anywhere until it was a directory again"},

	{"member of another namespace", remedyGossip, "a member's agent killed while its own pod runs on in another namespace than the cluster's", "not forced out: a namespace proves nothing"},
	{"member alive again", remedyGossip, "a ghost member's agent started again at its address within the grace period", "not forced out, nothing counted failed"},
	{"leader failover", remedyGossip, "the leader killed (SIGKILL) once it spent the budget (--budget=1), a ghost made once the other replica led", "the new leader refused the ghost: the budget's spending kept on the Lease"},
}

// knownFailures are the cells whose failure is known and not fixed yet,
// by "fault|remedy". TestRealFaults skips such a cell when every problem
// it found is the known one (saying what it found), fails it on any other,
// and fails it once it passes, so that the matrix says what ghostwatch
// does now; the cell's row in docs/faults.md says what it did.
var knownFailures = map[string]knownFailure{}

// knownFailure is a failure a cell is known to find: Match is in the text
// of each problem it finds, Why says what fails.
type knownFailure struct{ Why, Match string }

// known is the cell's known failure.
func (c faultCell) known() knownFailure { return knownFailures[c.Fault+"|"+c.Remedy] }

// faultFigures is what TestRealFaults measured of one cell: the two
// columns docs/faults.md takes from its last run.
type faultFigures struct {
	Ready, Figures string
}

// faultsDoc is docs/faults.md.
func faultsDoc() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "docs", "faults.md")
}

// renderFaults writes docs/faults.md: the matrix with each cell's
// wrongful actions and its figures (by row).
func renderFaults(wrongful []int, figs []faultFigures) string {
	var b strings.Builder
	b.WriteString(`# What ghostwatch survives

<!-- Written by ` + "`go test ./lab -run TestRealFaults -update`" + ` (as root, with GHOSTWATCH_KUBE_BIN
and GHOSTWATCH_CNI_BIN); TestFaultsDocIsCurrent holds it to the matrix in lab/faults_test.go. -->

Each remedy, played under each fault it can meet, on the real Kubernetes and the real kernel:
kube-apiserver with etcd, kube-controller-manager's EndpointSlice controller and kube-proxy
(iptables mode) in a node's network namespace, the node's own conntrack table, the CNI
host-local plugin called as runtimes call it, and real Serf agents. The agent and two
controller replicas are the ` + "`ghostwatch`" + ` binary, with the identities the manifests give them,
every remedy on (agent: ` + "`--remedy=stale-nat-flow,hostlocal-reserve --grace=" + faultGrace + " --audit-interval=" + faultAuditInterval + "`" + `; controller:
` + "`--remedy=gossip-force-leave --grace=" + faultGrace + " --gossip-interval=1s`" + `). ` + "`TestRealFaults`" + ` (lab/faults_real_test.go)
plays every row in CI, one fault after another on one control plane, and fails when an action
was wrongful or ` + "`/readyz`" + ` was untruthful; the figures are those of its last run with ` + "`-update`" + `
(2 cores).

An action is **wrongful** when it touches what is not a ghost (a flow to a pod that exists, a
reservation for a pod that is gone or shares its address, a member whose own pod runs), when it
is taken while the evidence is incomplete, before a full grace period of complete passes
after the fault was lifted, or beyond the budget. Each cell counts the actions from the
binaries' own ` + "`ghostwatch_remedy_actions_total{result}`" + ` and checks the kernel, the store and the
member lists: the ghosts' healthy neighbours (flows to live pods, the reservations of running
pods, live members) must survive. ` + "`/readyz`" + ` is **truthful** when it answers 503 with the reason
while the evidence is incomplete and 200 once it is complete again; each cell samples it every
200 ms, from the fault's injection on.

| # | fault | remedy | injected by | what ghostwatch did | wrongful actions | /readyz (measured) | figures (measured) |
|---|---|---|---|---|---|---|---|
`)
	for i, c := range faultCells {
		f := faultFigures{Ready: "not measured", Figures: "not measured"}
		if i < len(figs) {
			f = figs[i]
		}
		w := 0
		if i < len(wrongful) {
			w = wrongful[i]
		}
		fmt.Fprintf(&b, "| %d | %s | `%s` | %s | %s | %d | %s | %s |\n", i+1, c.Fault, c.Remedy, c.Injected, c.Did, w, cellText(f.Ready), cellText(f.Figures))
	}
	if rows := rowsWhere(func(c faultCell) bool { return strings.Contains(c.Did, "withheld") }); rows != "" {
		b.WriteString(`
**Withheld** (` + rows + `): a Serf member's list does not say when a member went, so the controller
proves that the pod now at a failed member's address is another identity by that pod's creation
coming after the leader first read the member listed (the clocks' measured offsets allowed for).
A leader that loses its Lease forgets what it read, and the next term first reads the member after
the new pod came: it cannot prove the ghost is one, and does not force it out. The ghost stays
reported critical, with ` + "`force_leave_withheld`" + ` in its evidence; force it out by hand, as its
runbook says.
`)
	}
	var known []string
	for i, c := range faultCells {
		if k := c.known(); k.Why != "" {
			known = append(known, fmt.Sprintf("- row %d (%s under %s): %s.", i+1, "`"+c.Remedy+"`", c.Fault, k.Why))
		}
	}
	if len(known) > 0 {
		b.WriteString(`
**Known failures**, which ` + "`TestRealFaults`" + ` skips while they fail that way and fails once they
pass, so that this page says what ghostwatch does:

` + strings.Join(known, "\n") + "\n")
	}
	b.WriteString(`
Not in the matrix, each tested where it lives: what a bundle holds (` + "`collect`" + ` leaves credentials
out), redaction of addresses, escaping of what members and pods name themselves, and the scan
off the node are not remedies; the agent's memory under mass failure is measured by
` + "`BenchmarkDeadBackends`" + `; who may read the agent's node API is
` + "`TestRealAgentAnswersOnlyWhomTheClusterAllows`" + `. A fault of the node (conntrack, host-local's
store, the proxy) meets only the agent's remedies, and a leader's only the controller's: those
cells do not exist.
`)
	return b.String()
}

// rowsWhere lists the rows of the cells cond accepts: "rows 6, 9 and 12".
func rowsWhere(cond func(faultCell) bool) string {
	var rows []string
	for i, c := range faultCells {
		if cond(c) {
			rows = append(rows, strconv.Itoa(i+1))
		}
	}
	switch len(rows) {
	case 0:
		return ""
	case 1:
		return "row " + rows[0]
	}
	return "rows " + strings.Join(rows[:len(rows)-1], ", ") + " and " + rows[len(rows)-1]
}

// cellText keeps s within one cell of a Markdown table.
func cellText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// parseFaultsDoc returns the wrongful actions and figures of each row of
// doc's table, by number.
func parseFaultsDoc(doc string) (wrongful []int, figs []faultFigures, err error) {
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| #") {
			continue
		}
		cols := splitRow(line)
		if len(cols) != 8 {
			return nil, nil, fmt.Errorf("row %q: %d columns, want 8", line, len(cols))
		}
		var n, w int
		if _, err := fmt.Sscan(cols[0], &n); err != nil || n != len(figs)+1 {
			return nil, nil, fmt.Errorf("row %q: numbered %q, want %d", line, cols[0], len(figs)+1)
		}
		if _, err := fmt.Sscan(cols[5], &w); err != nil {
			return nil, nil, fmt.Errorf("row %d: wrongful actions %q", n, cols[5])
		}
		wrongful = append(wrongful, w)
		figs = append(figs, faultFigures{Ready: cols[6], Figures: cols[7]})
	}
	return wrongful, figs, nil
}

// splitRow splits a table row into its cells, an escaped bar read as a
// bar.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |")
	var cols []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case strings.HasPrefix(line[i:], " | "):
			cols = append(cols, cur.String())
			cur.Reset()
			i += 2
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cols, cur.String())
}

// checkFaultsDoc returns an error when doc is not the matrix rendered
// with its own figures, every cell with no wrongful action.
func checkFaultsDoc(doc string) error {
	wrongful, figs, err := parseFaultsDoc(doc)
	if err != nil {
		return err
	}
	for i, w := range wrongful {
		if w != 0 && (i >= len(faultCells) || faultCells[i].known().Why == "") {
			return fmt.Errorf("row %d (%s under %s): %d wrongful actions", i+1, faultCells[min(i, len(faultCells)-1)].Remedy, faultCells[min(i, len(faultCells)-1)].Fault, w)
		}
	}
	if len(figs) != len(faultCells) {
		return fmt.Errorf("%d rows, the matrix has %d cells", len(figs), len(faultCells))
	}
	if want := renderFaults(wrongful, figs); doc != want {
		return fmt.Errorf("it is not the matrix of lab/faults_test.go:\n%s", firstDiff(doc, want))
	}
	return nil
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n have %s\n want %s", i+1, gl, wl)
		}
	}
	return ""
}

// docs/faults.md is the matrix TestRealFaults plays, every cell with no
// wrongful action, its figures those of the last run with -update. (The
// run itself needs root and the Kubernetes binaries; this check does
// not.)
func TestFaultsDocIsCurrent(t *testing.T) {
	b, err := os.ReadFile(faultsDoc())
	if err != nil {
		t.Fatalf("%v: write it with: go test ./lab -run TestRealFaults -update (as root, with GHOSTWATCH_KUBE_BIN and GHOSTWATCH_CNI_BIN)", err)
	}
	if err := checkFaultsDoc(string(b)); err != nil {
		t.Errorf("docs/faults.md: %v\nwrite it again with: go test ./lab -run TestRealFaults -update (as root, with GHOSTWATCH_KUBE_BIN and GHOSTWATCH_CNI_BIN)", err)
	}
}

// The check catches what it must: a row changed, a row missing, a
// wrongful action recorded; and a figure with a bar survives the trip.
func TestFaultsDocCheck(t *testing.T) {
	figs := make([]faultFigures, len(faultCells))
	for i := range figs {
		figs[i] = faultFigures{Ready: fmt.Sprintf("503 after %d.0 s", i), Figures: "a | b"}
	}
	doc := renderFaults(make([]int, len(faultCells)), figs)
	if err := checkFaultsDoc(doc); err != nil {
		t.Fatalf("the rendered matrix: %v", err)
	}
	for name, bad := range map[string]string{
		"a cell's text changed": strings.Replace(doc, faultCells[3].Did, "acted at once", 1),
		"a row missing":         strings.Replace(doc, "| 2 | ", "| x | ", 1),
		"a wrongful action":     strings.Replace(doc, "| 0 | 503 after 4.0 s", "| 1 | 503 after 4.0 s", 1),
		"the prose changed":     strings.Replace(doc, "**wrongful**", "wrong", 1),
	} {
		if bad == doc {
			t.Fatalf("%s: the change did not apply", name)
		}
		if err := checkFaultsDoc(bad); err == nil {
			t.Errorf("%s: the check passed", name)
		}
	}
}
