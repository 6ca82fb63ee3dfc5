package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/ghostwatch/ghostwatch/rule"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
)

// run executes the command line with buffers and returns the exit code,
// stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	code := Execute(context.Background(), NewRootCommand(streams), args, streams)
	return code, out.String(), errOut.String()
}

var offline = []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", "testdata/conntrack.txt", "--node-name", "worker-1"}

func TestScanOfflineTable(t *testing.T) {
	code, out, errOut := run(t, "", offline...)
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d; stderr: %s", code, ExitFindings, errOut)
	}
	for _, want := range []string{
		"stale-nat-flow: 2 findings",
		"tcp 203.0.113.10:40000 -> 192.168.50.1:30080",
		"backend 10.244.1.100:8080 gone, FIN_WAIT",
		"tcp 10.244.1.50:45678 -> 10.96.100.50:5432",
		"runbook: https://github.com/ghostwatch/ghostwatch/blob/main/docs/runbooks/stale-nat-flow.md",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The live backends and the non-DNAT DNS flow are not findings.
	for _, bad := range []string{"10.244.1.200", "10.244.3.48", "5353"} {
		if strings.Contains(out, bad) {
			t.Errorf("table mentions %s, which is healthy:\n%s", bad, out)
		}
	}
}

type jsonReport struct {
	Findings []struct {
		Rule     string            `json:"rule"`
		Severity string            `json:"severity"`
		Message  string            `json:"message"`
		Subject  map[string]string `json:"subject"`
		Evidence map[string]any    `json:"evidence"`
	} `json:"findings"`
	Sources []struct {
		Name, Status, Detail string
	} `json:"sources"`
	Skipped []struct {
		Rule          string `json:"rule"`
		Reason        string `json:"reason"`
		NotApplicable bool   `json:"not_applicable"`
		NotGiven      bool   `json:"not_given"`
	} `json:"skipped"`
}

func decodeOne(t *testing.T, s string) jsonReport {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var r jsonReport
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, s)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", s)
	}
	return r
}

func TestScanOfflineJSON(t *testing.T) {
	code, out, errOut := run(t, "", append(offline, "-o", "json")...)
	if code != ExitFindings {
		t.Fatalf("exit %d; stderr: %s", code, errOut)
	}
	r := decodeOne(t, out)
	if len(r.Findings) != 2 {
		t.Fatalf("got %d findings, want 2: %+v", len(r.Findings), r.Findings)
	}
	got := map[string]string{}
	for _, f := range r.Findings {
		if f.Rule != "stale-nat-flow" || f.Severity != "warning" || f.Subject["node"] != "worker-1" {
			t.Errorf("finding %+v", f)
		}
		got[f.Subject["ip"]] = f.Subject["service"]
	}
	if got["10.244.1.100"] != "web/api" || got["10.244.3.47"] != "db/postgres" {
		t.Errorf("ghost IPs -> services = %v", got)
	}
	// The saved objects hold no Calico ledger: unsupported; no gossip
	// member list and no copy of the node's files were given: not given;
	// neither failed.
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = string(s.Status)
	}
	if len(status) != 6 || status["kube"] != "ok" || status["conntrack"] != "ok" || status["calico"] != "unsupported" || status["gossip"] != "not given" ||
		status["hostlocal"] != "not given" || status["calico-node"] != "not given" {
		t.Errorf("sources = %+v", r.Sources)
	}
}

func TestScanFailOn(t *testing.T) {
	if code, _, errOut := run(t, "", append(offline, "--fail-on", "critical")...); code != ExitOK {
		t.Errorf("--fail-on critical with only warnings: exit %d, want 0; %s", code, errOut)
	}
	if code, _, _ := run(t, "", append(offline, "--fail-on", "none")...); code != ExitOK {
		t.Errorf("--fail-on none: exit %d, want 0", code)
	}
	if code, _, errOut := run(t, "", append(offline, "--fail-on", "loud")...); code != ExitError || !strings.Contains(errOut, `--fail-on "loud": want info, warning, critical or none`) {
		t.Errorf("--fail-on loud: exit %d, stderr %q", code, errOut)
	}
}

// The saved objects read from stdin feed both the cluster's source and
// Calico's: stdin is read once.
func TestScanSavedObjectsFromStdin(t *testing.T) {
	objects, err := os.ReadFile("testdata/scan/calico-ledger/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, string(objects), "scan", "--kube-objects", "-", "--rule", "ipam-ledger-corrupt", "--rule", "ipam-misbooked", "-o", "json")
	r := decodeOne(t, out)
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = s.Status + " " + s.Detail
	}
	if code != ExitFindings || len(r.Findings) == 0 || !strings.HasPrefix(status["kube"], "ok 5 pods") || !strings.HasPrefix(status["calico"], "ok 2 blocks") {
		t.Errorf("exit %d, %d findings, sources %v; stderr %s", code, len(r.Findings), status, errOut)
	}
}

func TestScanConntrackFromStdin(t *testing.T) {
	listing, err := os.ReadFile("testdata/conntrack.txt")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, string(listing), "scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", "-", "--node-name", "worker-1", "-o", "json")
	if code != ExitFindings || len(decodeOne(t, out).Findings) != 2 {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
}

// An objects file that holds no cluster is refused, never read as "every
// backend is gone".
func TestScanEmptyObjectsFileIsRefused(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: List\nitems: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "scan", "--kube-objects", empty, "--conntrack-file", "testdata/conntrack.txt", "--node-name", "worker-1", "-o", "json")
	if code != ExitError || len(decodeOne(t, out).Findings) != 0 || !strings.Contains(errOut, "no Pod, no Service") {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
}

func TestScanBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("tcp      6 117 FIN_WAIT src=203.0.113.10 dst=192.168.50.1 sport=40000 dport=30080 src=10.244.1.100 dst=203.0.113.10 sport=8080 dport=40000 [ASSURED]\ntcp 6 1 ESTABLISHED src=10.0.0.300 dst=1.2.3.4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty, summary := filepath.Join(dir, "empty.txt"), filepath.Join(dir, "summary.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(summary, []byte("conntrack v1.4.7 (conntrack-tools): 0 flow entries have been shown.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"malformed conntrack listing", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", bad, "--node-name", "worker-1"},
			[]string{bad + ":2:", "conntrack error"}},
		{"missing objects file", []string{"scan", "--kube-objects", filepath.Join(dir, "nope.yaml"), "--conntrack-file", "testdata/conntrack.txt"},
			[]string{"nope.yaml", "kube error"}},
		{"unknown node", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", "testdata/conntrack.txt", "--node-name", "worker-9"},
			[]string{`node "worker-9" is not in the cluster`, "worker-1"}},
		{"unknown output", append(offline, "-o", "xml"), []string{`-o "xml"`}},
		{"unknown rule", append(offline, "--rule", "nope"), []string{`unknown rule "nope"`, "stale-nat-flow"}},
		{"bad CIDR", append(offline, "--nodeport-addresses", "10.0.0.0/33"), []string{"--nodeport-addresses"}},
		{"negative duration", append(offline, "--clock-skew", "-2s"), []string{"--clock-skew -2s: a duration must not be negative"}},
		{"captured-at not a time", append(offline, "--captured-at", "yesterday"), []string{`--captured-at "yesterday": want a time as RFC 3339 writes it`}},
		{"captured-at without a file", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--captured-at", "2026-11-22T15:00:00Z"}, []string{"--captured-at needs --conntrack-file"}},
		{"missing objects file has a hint", []string{"scan", "--kube-objects", filepath.Join(dir, "nope.yaml"), "--conntrack-file", "testdata/conntrack.txt"},
			[]string{"does not exist", "kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml > FILE"}},
		// What `conntrack -L > f` leaves without root: an empty file.
		{"empty conntrack file", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", empty, "--node-name", "worker-1"},
			[]string{empty + " is empty", "the capture failed", "sudo conntrack -L"}},
		{"conntrack summary only", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", summary, "--node-name", "worker-1"},
			[]string{summary + " holds no conntrack entries", "sudo conntrack -L"}},
		{"empty stdin", []string{"scan", "--kube-objects", "testdata/objects.yaml", "--conntrack-file", "-", "--node-name", "worker-1"},
			[]string{"stdin is empty", "sudo conntrack -L"}},
		{"stdin for both inputs", []string{"scan", "--kube-objects", "-", "--conntrack-file", "-", "--node-name", "worker-1"},
			[]string{`"-" (stdin) is given more than once`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, "", tc.args...)
			if code != ExitError {
				t.Errorf("exit %d, want %d", code, ExitError)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("want one error line, got:\n%s", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func TestScanUnreachableAPIServer(t *testing.T) {
	// Nothing listens on port 1 of loopback: the connection is refused.
	code, out, errOut := run(t, "", "scan", "--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify", "--token", "x",
		"--sync-timeout", "3s", "--conntrack-file", "testdata/conntrack.txt", "--live", "--node-name", "worker-1", "-o", "json")
	if code != ExitError {
		t.Fatalf("exit %d, want %d; stderr %s", code, ExitError, errOut)
	}
	r := decodeOne(t, out)
	if len(r.Findings) != 0 {
		t.Fatalf("findings claimed with the API server down: %+v", r.Findings)
	}
	if r.Sources[0].Name != "kube" || r.Sources[0].Status != "error" || !strings.Contains(r.Sources[0].Detail, "127.0.0.1:1") {
		t.Errorf("kube source = %+v", r.Sources[0])
	}
	if !strings.Contains(errOut, "connection refused") {
		t.Errorf("stderr %q does not say why", errOut)
	}
}

// version names the version, the commit and the Go toolchain.
func TestVersion(t *testing.T) {
	code, out, errOut := run(t, "", "version")
	if code != ExitOK || !strings.HasPrefix(out, "ghostwatch ") || !strings.Contains(out, "(commit ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// The shell completes the values of -o, --rule and --fail-on.
func TestScanCompletions(t *testing.T) {
	for flag, want := range map[string]string{"-o": "json", "--rule": "stale-nat-flow", "--fail-on": "none"} {
		code, out, errOut := run(t, "", "__complete", "scan", flag, "")
		if code != ExitOK || !strings.Contains(out, want+"\n") {
			t.Errorf("completing %s: exit %d, stdout %q, stderr %q; want %q offered", flag, code, out, errOut, want)
		}
	}
}

// The root help lists the rules the registry holds, and nothing else.
func TestRootHelpListsTheRegistry(t *testing.T) {
	code, out, _ := run(t, "", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, id := range rule.IDs(rule.All(rule.Config{})) {
		if !strings.Contains(out, "  "+id+"\n") {
			t.Errorf("root help lacks rule %s:\n%s", id, out)
		}
	}
}

// Installed as kubectl-ghostwatch, the help shows commands as kubectl runs
// them.
func TestKubectlPluginHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	root := NewRootCommand(streams)
	asKubectlPlugin(root)
	if code := Execute(t.Context(), root, []string{"scan", "--help"}, streams); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	help := out.String()
	for _, want := range []string{"kubectl ghostwatch scan [flags]", "  kubectl ghostwatch scan --kube-objects objects.yaml"} {
		if !strings.Contains(help, want) {
			t.Errorf("plugin help lacks %q:\n%s", want, help)
		}
	}
	for _, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "ghostwatch ") {
			t.Errorf("plugin help shows a command kubectl would not run: %q", line)
		}
	}
}

// Calico's ledger is read where the cluster objects come from: the saved
// files, through the kube source, or the API server the flags name.
func TestScanCalicoSource(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	saved := &kubectl.Files{Paths: []string{"testdata/objects.yaml"}}
	o := &scanOptions{kubeFlags: genericclioptions.NewConfigFlags(true), kubeObjects: saved.Paths}
	if src, err := o.calicoSource(saved); err != nil || reflect.TypeOf(src) != reflect.TypeOf(&calico.FileSource{}) {
		t.Errorf("with --kube-objects: %#v, %v", src, err)
	}
	server := "https://127.0.0.1:6443"
	o = &scanOptions{kubeFlags: genericclioptions.NewConfigFlags(true), syncTimeout: 7 * time.Second}
	o.kubeFlags.APIServer = &server
	src, err := o.calicoSource(nil)
	api, ok := src.(*calico.APISource)
	if err != nil || !ok || api.Timeout != 7*time.Second || api.Client == nil || api.Discovery == nil || src.Name() != calico.Name {
		t.Errorf("live: %#v, %v", src, err)
	}
}

// A member list that cannot be read stops the scan with its file and line;
// one given to a scan whose rules read none is refused.
func TestScanGossipMembersErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "members.txt")
	if err := os.WriteFile(bad, []byte("Node Address Status\nn1 10.0.0.1:8301 zombie\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	objects := "testdata/scan/gossip-reuse/objects.yaml"
	code, _, errOut := run(t, "", "scan", "--kube-objects", objects, "--gossip-members", bad, "--rule", "gossip-ghost-member")
	if code != ExitError || !strings.Contains(errOut, bad+`:2: n1: status "zombie"`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, "", "scan", "--kube-objects", objects, "--gossip-members", bad, "--rule", "duplicate-pod-ip")
	if code != ExitError || !strings.Contains(errOut, "--gossip-members: no rule of this scan reads gossip members (duplicate-pod-ip)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// scan --consul reads a Consul agent's members live, with the token
// consul's CLI takes from the environment.
func TestScanConsulLive(t *testing.T) {
	members, err := os.ReadFile("../source/gossip/testdata/consul-api.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("X-Consul-Token") != "reader":
			http.Error(w, "Permission denied", http.StatusForbidden)
		case r.URL.Path == "/v1/agent/members":
			w.Write(members)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	args := []string{"scan", "--kube-objects", "testdata/scan/gossip-reuse/objects.yaml", "--consul", srv.URL, "--rule", "gossip-ghost-member", "-o", "json"}
	t.Setenv("CONSUL_HTTP_TOKEN", "reader")
	code, out, errOut := run(t, "", args...)
	if code != ExitFindings || !strings.Contains(out, `"ip": "10.0.1.50"`) || !strings.Contains(out, `"force_leave": "consul force-leave -prune node-abc-old"`) {
		t.Errorf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	// A password in the address is printed nowhere: not in the view, not
	// in an error.
	withPassword := strings.Replace(srv.URL, "http://", "http://ops:hunter2@", 1)
	for _, a := range []string{withPassword, withPassword + "/nothing"} {
		code, out, errOut = run(t, "", "scan", "--kube-objects", "testdata/scan/gossip-reuse/objects.yaml", "--consul", a, "--rule", "gossip-ghost-member", "-o", "yaml")
		if strings.Contains(out+errOut, "hunter2") || strings.Contains(out+errOut, "ops:") || !strings.Contains(out+errOut, "http://xxxxx@") {
			t.Errorf("--consul %s: exit %d, stdout %s, stderr %s", a, code, out, errOut)
		}
	}
	// Without the token: a degraded source, and no finding claimed.
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	code, _, errOut = run(t, "", args...)
	if code != ExitError || !strings.Contains(errOut, "ACL denied") {
		t.Errorf("without a token: exit %d, stderr %s", code, errOut)
	}
}

// scan --serf reads a Serf agent's members live over its RPC, with the
// auth key from --serf-auth or SERF_RPC_AUTH; a key refused, or none given
// to an agent that wants one, stops the scan with what to do.
func TestScanSerfLive(t *testing.T) {
	agent := serftest.Start(t, serftest.Config{Name: "node-127-0-0-8", Gossip: netip.MustParseAddrPort("127.0.0.8:0"), RPC: netip.MustParseAddrPort("127.0.0.8:0"), AuthKey: "scan-key"})
	args := []string{"scan", "--kube-objects", "testdata/scan/gossip-reuse/objects.yaml", "--serf", agent.RPC, "--rule", "gossip-ip-identity", "-o", "json"}
	t.Setenv("SERF_RPC_AUTH", "scan-key")
	code, out, errOut := run(t, "", args...)
	if code != ExitFindings || !strings.Contains(out, `"rule": "gossip-ip-identity"`) || !strings.Contains(out, "serf cluster (seen by node-127-0-0-8, "+agent.RPC+")") {
		t.Errorf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	for _, tc := range []struct {
		env  string
		flag []string
		want string
	}{
		{"", nil, "serf agent " + agent.RPC + ": Authentication required"},
		{"scan-key", []string{"--serf-auth", "wrong"}, "serf agent " + agent.RPC + ": Invalid authentication token"},
	} {
		t.Setenv("SERF_RPC_AUTH", tc.env)
		code, _, errOut = run(t, "", append(args, tc.flag...)...)
		if code != ExitError || !strings.Contains(errOut, "scan incomplete") || !strings.Contains(errOut, tc.want) {
			t.Errorf("SERF_RPC_AUTH=%q %v: exit %d, stderr %s", tc.env, tc.flag, code, errOut)
		}
	}
}

// Live agents of one kind per scan, and an auth key only for Serf agents.
func TestScanGossipFlagsConflict(t *testing.T) {
	objects := "testdata/scan/gossip-reuse/objects.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--consul", "127.0.0.1:8500", "--serf", "127.0.0.1:7373"}, "--consul and --serf: give one kind of member list per scan"},
		{[]string{"--gossip-members", "testdata/scan/gossip-reuse/members.txt", "--serf", "127.0.0.1:7373"}, "--gossip-members and --serf: give one kind"},
		{[]string{"--serf-auth", "k"}, "--serf-auth needs --serf"},
		{[]string{"--serf", "127.0.0.1:7373", "--rule", "duplicate-pod-ip"}, "--serf: no rule of this scan reads gossip members"},
	} {
		code, _, errOut := run(t, "", append([]string{"scan", "--kube-objects", objects}, tc.args...)...)
		if code != ExitError || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// scan -o text is the table, as -o table (still accepted) and the default.
func TestScanTextIsTheTable(t *testing.T) {
	_, def, _ := run(t, "", offline...)
	for _, o := range []string{"text", "table"} {
		code, out, errOut := run(t, "", append(append([]string(nil), offline...), "-o", o)...)
		if code != ExitFindings || out != def {
			t.Errorf("-o %s: exit %d, stderr %q, stdout differs from the default:\n%s", o, code, errOut, out)
		}
	}
	if !strings.Contains(def, "stale-nat-flow: 2 findings") {
		t.Errorf("default output is not the table:\n%s", def)
	}
}

// scan names its outputs as every ghostwatch command does (the lab too): an
// unknown -o gets the answer of internal/cmdline, before anything runs, and
// the shell offers the same names.
func TestOutputNamesShared(t *testing.T) {
	code, out, errOut := run(t, "", append(append([]string(nil), offline...), "-o", "xml")...)
	if code != ExitError || out != "" || errOut != "ghostwatch: -o \"xml\": want text, json or yaml\n" {
		t.Errorf("scan -o xml: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "", "__complete", "scan", "-o", "")
	names, _, _ := strings.Cut(out, ":")
	if code != ExitOK || names != "text\njson\nyaml\n" {
		t.Errorf("completing scan -o: exit %d, stdout %q, stderr %q; want text, json, yaml", code, out, errOut)
	}
}

// A scan of saved evidence reads nothing of the machine it runs on unless
// asked by --live: not its conntrack table, not its addresses, not its
// files. The conntrack rules are not judged, and the report says which
// file would judge them. (As root, the scan once read this machine's table
// for a node not in the dump and printed "No ghosts found.")
func TestScanOfSavedEvidenceReadsNothingLive(t *testing.T) {
	code, out, errOut := run(t, "", "scan", "--kube-objects", "testdata/scan/deleted-service/objects.yaml", "--node-name", "worker-1", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	r := decodeOne(t, out)
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = string(s.Status) + ": " + s.Detail
	}
	if _, ok := status["host"]; ok {
		t.Errorf("this host's addresses were read: %s", status["host"])
	}
	for _, src := range []string{"conntrack", "hostlocal", "calico-node"} {
		if !strings.HasPrefix(status[src], "not given: ") {
			t.Errorf("source %s = %q, want not given", src, status[src])
		}
	}
	notGiven := 0
	for _, sk := range r.Skipped {
		if sk.Rule == "stale-nat-flow" && !sk.NotGiven {
			t.Errorf("stale-nat-flow skipped as %+v, want not given", sk)
		}
		if sk.NotGiven {
			notGiven++
		}
	}
	if notGiven == 0 {
		t.Errorf("no rule said not judged for want of input: %+v", r.Skipped)
	}
	code, _, errOut = run(t, "", "scan", "--live")
	if code != ExitError || !strings.Contains(errOut, "--live: this scan reads everything live already") {
		t.Errorf("--live alone: exit %d, %s", code, errOut)
	}
}

// An error names the flags that were given, not those that were not.
func TestScanNamesTheFlagGiven(t *testing.T) {
	code, _, errOut := run(t, "", "scan", "--kube-objects", "testdata/scan/pods-only/objects.yaml", "--rule", "duplicate-pod-ip", "--conntrack-file", "testdata/conntrack.txt")
	if code != ExitError || !strings.Contains(errOut, "--conntrack-file: no rule of this scan reads the conntrack table") || strings.Contains(errOut, "--captured-at") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}
