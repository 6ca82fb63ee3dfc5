package labcmd

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// The lab names its outputs as scan does: an unknown -o gets the answer
// every ghostwatch command gives (internal/cmdline), listing the same
// names, before anything runs.
func TestOutputNamesShared(t *testing.T) {
	for _, args := range [][]string{
		{"conntrack-deploy", "-o", "xml"},
		{"conntrack-pool", "-o", "xml"},
		{"hostlocal-wipe", "-o", "xml"},
		{"calico-misbook", "-o", "xml"},
		{"gossip-reuse", "-o", "xml"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != cmdline.ExitError || out != "" || errOut != "ghostwatch: -o \"xml\": want text, json or yaml\n" {
			t.Errorf("ghostwatch-lab %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// The shell offers the same -o names for the lab as for scan.
func TestOutputCompletionsShared(t *testing.T) {
	for _, cmd := range [][]string{{"conntrack-deploy"}, {"conntrack-pool"}, {"hostlocal-wipe"}, {"calico-misbook"}, {"gossip-reuse"}} {
		code, out, errOut := run(t, "", append(append([]string{"__complete"}, cmd...), "-o", "")...)
		names, _, _ := strings.Cut(out, ":")
		if code != cmdline.ExitOK || names != "text\njson\nyaml\n" {
			t.Errorf("completing %s -o: exit %d, stdout %q, stderr %q; want text, json, yaml", strings.Join(cmd, " "), code, out, errOut)
		}
	}
}

// lab gossip-reuse is listed, and says what each act plays, that its
// timings are shortened, and what it needs; it takes no argument.
func TestLabGossipReuseCommand(t *testing.T) {
	code, out, _ := run(t, "", "--help")
	if code != cmdline.ExitOK || !strings.Contains(out, "gossip-reuse") || !strings.Contains(out, "Seed 000: a gossip member outlives its pod") {
		t.Errorf("ghostwatch-lab --help does not list gossip-reuse:\n%s", out)
	}
	code, out, _ = run(t, "", "gossip-reuse", "--help")
	for _, want := range []string{
		"1a  memberlist, members named after their IPs", "1b  ", "2   Serf", "3   the ghostwatch/gossip package", "4a  ", "4b  ",
		"gossip-ghost-member", "gossip-ip-identity", "force-leave -prune", "unacceptable label",
		"Timings are shortened", "GossipToTheDeadTime 3s", "It needs no root", "127.0.0.111 to 127.0.0.146", "Ctrl-C", "-o json",
	} {
		if code != cmdline.ExitOK || !strings.Contains(out, want) {
			t.Errorf("lab gossip-reuse --help (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	code, out, errOut := run(t, "", "gossip-reuse", "now")
	if code != cmdline.ExitError || out != "" || errOut != "ghostwatch: unknown command \"now\" for \"ghostwatch-lab gossip-reuse\"\n" {
		t.Errorf("lab gossip-reuse now: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// lab calico-misbook is listed, teaches what it plays and needs, and
// refuses what it cannot run before it starts anything: a grace too short
// for the fix, and binaries that are not built, naming what builds them.
func TestLabCalicoMisbookCommand(t *testing.T) {
	code, out, _ := run(t, "", "--help")
	if code != cmdline.ExitOK || !strings.Contains(out, "calico-misbook") || !strings.Contains(out, "Seed 002: Calico books a pod under a stale node name") {
		t.Errorf("ghostwatch-lab --help does not list calico-misbook:\n%s", out)
	}
	code, out, _ = run(t, "", "calico-misbook", "--help")
	for _, want := range []string{
		"Calico issue #12257", "Calico v3.30.1's own", "stale-nodename-file", "ipam-misbooked", "duplicate-pod-ip",
		"20s by default, where Calico's\ndefault is 15m", "scripts/kube-binaries.sh", "scripts/calico-binaries.sh",
		"ghostwatch-lab build kube builds (about 10 minutes, once", "build calico builds (about 8 minutes, once", "--build builds it without\nasking",
		"$GHOSTWATCH_KUBE_BIN", "$GHOSTWATCH_CALICO_BIN", "It needs no root", "Ctrl-C",
		"--leak-grace-period duration", "(Calico's default is 15m); at least 5s", "(default 20s)",
	} {
		if code != cmdline.ExitOK || !strings.Contains(out, want) {
			t.Errorf("lab calico-misbook --help (exit %d) lacks %q:\n%s", code, want, out)
		}
	}

	fake := t.TempDir()
	// An empty build cache: nothing is found there either.
	t.Setenv("GHOSTWATCH_KUBE_CACHE", t.TempDir())
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"} {
		if err := os.WriteFile(fake+"/"+b, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		env  [2]string // GHOSTWATCH_KUBE_BIN, GHOSTWATCH_CALICO_BIN
		args []string
		want string
	}{
		{args: []string{"--leak-grace-period", "2s"},
			want: "ghostwatch: --leak-grace-period 2s: at least 5s, so that the fix is played before the collector can free the address\n"},
		{args: []string{"--leak-grace-period", "-1s"}, want: "ghostwatch: --leak-grace-period -1s: a duration must not be negative\n"},
		{args: []string{"now"}, want: "ghostwatch: unknown command \"now\" for \"ghostwatch-lab calico-misbook\"\n"},
		{want: "ghostwatch: " + notBuiltKube + "\n"},
		{args: []string{"--kube-bin", fake + "/none"}, want: "ghostwatch: --kube-bin " + fake + "/none has no executable etcd: run ghostwatch-lab build kube\n"},
		{env: [2]string{fake, ""},
			want: "ghostwatch: the Calico binaries are not built: build them with `ghostwatch-lab build calico` (about 8 minutes, once), or pass --build to build them first (in a checkout, scripts/calico-binaries.sh builds the same); or name a directory holding them with --calico-bin or $GHOSTWATCH_CALICO_BIN\n"},
		{args: []string{"--kube-bin", fake, "--calico-bin", fake},
			want: "ghostwatch: --calico-bin " + fake + " has no executable calico-kube-controllers: run ghostwatch-lab build calico\n"},
		{env: [2]string{"", fake},
			want: "ghostwatch: " + notBuiltKube + "\n"},
		{env: [2]string{fake + "/none", ""},
			want: "ghostwatch: GHOSTWATCH_KUBE_BIN=" + fake + "/none has no executable etcd: run ghostwatch-lab build kube\n"},
	} {
		t.Setenv("GHOSTWATCH_KUBE_BIN", tc.env[0])
		t.Setenv("GHOSTWATCH_CALICO_BIN", tc.env[1])
		code, out, errOut := run(t, "", append([]string{"calico-misbook"}, tc.args...)...)
		if code != cmdline.ExitError || out != "" || errOut != tc.want {
			t.Errorf("lab calico-misbook %s (GHOSTWATCH_KUBE_BIN=%q GHOSTWATCH_CALICO_BIN=%q): exit %d, stdout %q, stderr %q; want %q",
				strings.Join(tc.args, " "), tc.env[0], tc.env[1], code, out, errOut, tc.want)
		}
	}
}

// lab -o yaml prints the object -o json prints.
func TestLabResultYAMLIsTheJSON(t *testing.T) {
	res := &lab.Result{Scenario: "conntrack-deploy", Runs: []lab.Run{{
		Agent: true, ErrorWindowSeconds: 0.25, FailedRequests: 3, Recovered: true,
		Findings: []finding.Finding{{Rule: "stale-nat-flow", Severity: finding.Critical, Message: "a <ghost> & more",
			Subject: finding.Subject{IP: "10.244.1.100", Flow: "tcp 203.0.113.10:40000 -> 192.168.50.1:30080"}}},
	}}}
	var js, ys bytes.Buffer
	if err := writeResult(&js, "json", res); err != nil {
		t.Fatal(err)
	}
	if err := writeResult(&ys, "yaml", res); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(strings.TrimSpace(ys.String()), "{") {
		t.Fatalf("-o yaml printed JSON:\n%s", ys.String())
	}
	fromYAML, err := yaml.YAMLToJSON(ys.Bytes())
	if err != nil {
		t.Fatalf("-o yaml is not YAML: %v\n%s", err, ys.String())
	}
	var a, b any
	if err := json.Unmarshal(js.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(fromYAML, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("yaml and json differ:\njson: %s\nyaml: %s", js.String(), ys.String())
	}
	var text bytes.Buffer
	if err := writeResult(&text, "text", res); err != nil || text.Len() != 0 {
		t.Errorf("-o text printed %q, %v after the timeline", text.String(), err)
	}
}

// labProcess is `ghostwatch-lab conntrack-deploy` running as a process of
// its own, its stdout a pipe the test reads line by line.
type labProcess struct {
	cmd    *exec.Cmd
	prefix string
	stdout *os.File
	lines  *bufio.Scanner
	stderr bytes.Buffer
}

func startLab(t *testing.T) *labProcess {
	t.Helper()
	testenv.RequireRoot(t, "kernel test: the lab needs root to create network namespaces")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	p := &labProcess{prefix: "gwc" + hex.EncodeToString(b)[:5]}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(exe, "conntrack-deploy", "--prefix", p.prefix)
	p.cmd.Env = append(os.Environ(), "GHOSTWATCH_RUN_MAIN=1")
	p.cmd.Stdout, p.cmd.Stderr = w, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p.stdout, p.lines = r, bufio.NewScanner(r)
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		r.Close()
		// What a lab that died would have left.
		for _, n := range namespacesOf(t, p.prefix) {
			_ = netbed.DeleteNamespace(n)
		}
	})
	return p
}

// readUntil reads the timeline until a line containing s.
func (p *labProcess) readUntil(t *testing.T, s string) {
	t.Helper()
	for p.lines.Scan() {
		if strings.Contains(p.lines.Text(), s) {
			return
		}
	}
	t.Fatalf("the lab ended before printing %q: %v; stderr:\n%s", s, p.lines.Err(), p.stderr.String())
}

// wait waits for the lab to end and checks it ended through its cleanup:
// by itself with exit code 2, not killed by a signal, no namespace left,
// and an error that says why, naming want.
func (p *labProcess) wait(t *testing.T, want string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(poll.Patience):
		t.Fatalf("the lab did not stop within %v; stderr:\n%s", poll.Patience, p.stderr.String())
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || ws.ExitStatus() != cmdline.ExitError {
		t.Errorf("the lab ended with %v, want exit %d; stderr:\n%s", p.cmd.ProcessState, cmdline.ExitError, p.stderr.String())
	}
	if errOut := p.stderr.String(); !strings.Contains(errOut, want) || !strings.Contains(errOut, "removed every namespace it created") {
		t.Errorf("stderr %q does not say %q and that the namespaces are gone", errOut, want)
	}
	if left := namespacesOf(t, p.prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// ghostwatch-lab ... | head: once the reader is gone, the lab stops and
// removes its namespaces instead of dying of SIGPIPE.
func TestLabStopsWhenStdoutCloses(t *testing.T) {
	p := startLab(t)
	p.readUntil(t, "pod web/api-v1 running")
	p.stdout.Close()
	p.wait(t, "writing the timeline: write /dev/stdout: broken pipe")
}

// The terminal closing (SIGHUP) ends the lab through its cleanup.
func TestLabStopsOnSIGHUP(t *testing.T) {
	p := startLab(t)
	p.readUntil(t, "pod web/api-v1 running")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, p.stdout)
	p.wait(t, "interrupted: hangup signal received")
}

// namespacesOf lists the network namespaces named prefix-*.
func namespacesOf(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := netbed.Namespaces(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lab cleanup removes a dead lab's namespaces and says which; refuses while
// a lab runs with the prefix; and with nothing left says so and exits 0. A
// scenario started over a dead lab's namespaces names every one and how to
// remove them.
func TestLabCleanup(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root to create network namespaces")
	b := make([]byte, 3)
	rand.Read(b)
	p := "gwc" + hex.EncodeToString(b)[:5]
	t.Cleanup(func() {
		for _, n := range namespacesOf(t, p) {
			_ = netbed.DeleteNamespace(n)
		}
	})
	add := func(name string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
	}

	// A lab running with the prefix: its namespaces are not to be touched.
	running, err := netbed.ClaimPrefix(p)
	if err != nil {
		t.Fatal(err)
	}
	add(p + "-node")
	code, out, errOut := run(t, "", "cleanup", "--prefix", p)
	want := fmt.Sprintf("ghostwatch: another lab (pid %d) is running with prefix %s; wait for it or use --prefix\n", os.Getpid(), p)
	if code != cmdline.ExitError || out != "" || errOut != want {
		t.Errorf("cleanup while a lab runs: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if got := namespacesOf(t, p); len(got) != 1 {
		t.Errorf("namespaces after a refused cleanup: %v", got)
	}

	// It dies without cleaning up.
	running.Release()
	add(p + "-client")
	code, out, errOut = run(t, "", "conntrack-pool", "--prefix", p)
	want = fmt.Sprintf("ghostwatch: leftovers of a lab that is no longer running: %[1]s-client, %[1]s-node; remove them with `ghostwatch-lab cleanup --prefix %[1]s`\n", p)
	if code != cmdline.ExitError || errOut != want {
		t.Errorf("lab over leftovers: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	code, out, errOut = run(t, "", "cleanup", "--prefix", p)
	if want := fmt.Sprintf("removed network namespace %[1]s-client\nremoved network namespace %[1]s-node\n", p); code != cmdline.ExitOK || out != want {
		t.Errorf("cleanup: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if got := namespacesOf(t, p); len(got) > 0 {
		t.Errorf("namespaces left after cleanup: %v", got)
	}
	code, out, errOut = run(t, "", "cleanup", "--prefix", p)
	if want := "nothing to do: no network namespace named " + p + "-* is left\n"; code != cmdline.ExitOK || out != want || errOut != "" {
		t.Errorf("cleanup with nothing left: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
}

// cluster refuses what it cannot stand up before it builds or starts
// anything, and its help says what it needs and how to remove a killed one.
func TestClusterCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"cluster", "--nodes", "3"}, "--nodes 3: want 1 or 2"},
		{[]string{"cluster", "--remedy", "gossip-force-leave"}, "--remedy gossip-force-leave: the agent's remedies are stale-nat-flow and hostlocal-reserve"},
		{[]string{"cluster", "extra"}, "unknown command"},
	} {
		code, out, errOut := run(t, "", c.args...)
		if code != cmdline.ExitError || out != "" || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, out, errOut, cmdline.ExitError, c.says)
		}
	}
	code, out, _ := run(t, "", "cluster", "--help")
	for _, want := range []string{"needs root", "checkout of ghostwatch", "ghostwatch-lab cleanup --prefix gwn", "--nodes", "--remedy"} {
		if code != cmdline.ExitOK || !strings.Contains(out, want) {
			t.Errorf("cluster --help: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}
