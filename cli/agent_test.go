package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

func TestAgentFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--remedy", "delete-everything"}, `--remedy "delete-everything": the remedies are hostlocal-reserve, stale-nat-flow`},
		{[]string{"--dry-run"}, "--dry-run needs --remedy"},
		{[]string{"--remedy", "stale-nat-flow", "--budget", "0"}, "--budget 0: must be at least 1"},
		{[]string{"--grace", "500ms"}, "--grace 500ms: must be at least 1s"},
		{[]string{"--grace", "-1s"}, "--grace -1s: a duration must not be negative"},
		{[]string{"--audit-interval", "-2m"}, "--audit-interval -2m0s: a duration must not be negative"},
		{[]string{"--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"--nodeport-addresses", "10.0.0.0/33"}, "--nodeport-addresses"},
	} {
		var out, errOut bytes.Buffer
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
		code := Execute(t.Context(), NewRootCommand(streams), append([]string{"agent"}, tc.args...), streams)
		if code != ExitError || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// Without CAP_NET_ADMIN the agent refuses to start, in one line, before it
// talks to anything.
func TestAgentWithoutNetAdmin(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root to run the agent as another user")
	cmd := exec.Command(selfBinary(t), "agent", "--server", "https://127.0.0.1:1", "--listen", "")
	cmd.Env = append(os.Environ(), "GHOSTWATCH_RUN_MAIN=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != ExitError {
		t.Fatalf("exit %d, want %d; stderr: %s", code, ExitError, stderr.String())
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "CAP_NET_ADMIN") {
		t.Errorf("want one line naming CAP_NET_ADMIN, got:\n%s", msg)
	}
}

// With CAP_NET_ADMIN as its only capability, as an unprivileged user, the
// agent runs; with the API server unreachable it is alive but not ready and
// says why; on SIGTERM it stops cleanly with status 0.
func TestAgentOnlyNetAdminAndSIGTERM(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root to run the agent as another user")
	cmd := exec.Command(selfBinary(t), "agent", "--server", "https://127.0.0.1:1", "--token", "x",
		"--insecure-skip-tls-verify", "--listen", "127.0.0.1:0", "--address-listen", "127.0.0.1:0", "--node-name", "node-a", "--remedy", "stale-nat-flow")
	// The flags are the whole configuration: no kubeconfig of the machine's.
	cmd.Env = append(os.Environ(), "GHOSTWATCH_RUN_MAIN=1", "HOME=/nonexistent", "KUBECONFIG=")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: []uintptr{unix.CAP_NET_ADMIN},
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan map[string]any, 100)
	var logs bytes.Buffer
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stderr, &logs))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Where it serves /metrics and the probes, then what its node holds.
	var addrs []string
	deadline := time.After(poll.Patience)
	for len(addrs) < 2 {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("agent exited early: %s", logs.String())
			}
			if a, ok := m["address"].(string); ok {
				addrs = append(addrs, a)
			}
		case <-deadline:
			t.Fatal("the agent never said where it serves")
		}
	}
	addr, addressAddr := addrs[0], addrs[1]
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	poll.UntilNoted(t, poll.Patience, "/readyz to say degraded", func() (bool, string) {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "degraded") && strings.Contains(body, "not listed yet") &&
			strings.Contains(body, "connection refused"), fmt.Sprintf("%d %q; logs:\n%s", code, body, logs.String())
	})
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q while the loop runs", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `ghostwatch_degraded{reason="cache-stale"} 1`) {
		t.Errorf("/metrics does not say the agent is degraded:\n%s", body)
	}
	// What the node's table holds is for no local user: without a token,
	// no flow and no question to the API server; with a token the API
	// server cannot check, no flow either.
	for _, c := range []struct {
		token string
		code  int
		want  string
	}{
		{"", http.StatusUnauthorized, "no bearer token"},
		{"x", http.StatusServiceUnavailable, "the token cannot be checked"},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addressAddr+"/v1/flows/10.244.1.5", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) || strings.Contains(string(b), `"flows"`) {
			t.Errorf("/v1/flows/ with token %q: %d %q; want %d, %q and no flow", c.token, resp.StatusCode, b, c.code, c.want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM; logs:\n%s", err, logs.String())
		}
	case <-time.After(poll.Patience):
		t.Fatalf("agent did not stop within %v of SIGTERM", poll.Patience)
	}
	if !strings.Contains(logs.String(), "agent stopping") {
		t.Errorf("no shutdown log line:\n%s", logs.String())
	}
}

// The DaemonSet ships args the agent accepts, and they leave it report-only.
func TestDeployedAgentArgsAreValid(t *testing.T) {
	ds, err := deploy.AgentDaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	cmd, o := agentCommand(streams)
	if args[0] != cmd.Name() {
		t.Fatalf("args %v: want the %s command first", args, cmd.Name())
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("deploy/agent/daemonset.yaml args %v: %v", args, err)
	}
	if _, err := o.validate(streams); err != nil {
		t.Fatalf("deploy/agent/daemonset.yaml args %v: %v", args, err)
	}
	if len(o.remedies) != 0 || o.dryRun {
		t.Errorf("deploy/agent/daemonset.yaml turns on remedies %v: the shipped agent must only report", o.remedies)
	}
}

// The agent's logs read durations as durations, in JSON and in text.
func TestLogDurations(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		log, err := newLogger(&b, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		log.Info("agent starting", "grace", 30*time.Second, "auditInterval", 2*time.Minute)
		if !strings.Contains(b.String(), "30s") || !strings.Contains(b.String(), "2m0s") || strings.Contains(b.String(), "30000000000") {
			t.Errorf("%s: %s", format, b.String())
		}
	}
	if _, err := newLogger(io.Discard, "xml", "info"); err == nil {
		t.Error("--log-format xml accepted")
	}
}
