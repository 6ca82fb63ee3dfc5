package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// Without CAP_NET_ADMIN the kernel refuses the conntrack dump: the scan says
// so in one line and exits 2, claiming nothing.
func TestScanWithoutNetAdmin(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root to run the scan as another user")
	bin := selfBinary(t)
	objects, err := filepath.Abs("testdata/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "scan", "--kube-objects", objects, "--live", "--node-name", "worker-1", "-o", "json")
	cmd.Env = append(os.Environ(), "GHOSTWATCH_RUN_MAIN=1")
	cmd.Dir = filepath.Dir(bin)
	// nobody: no capabilities at all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if code != ExitError {
		t.Fatalf("exit %d (%v), want %d; stderr: %s", code, err, ExitError, stderr.String())
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "CAP_NET_ADMIN") {
		t.Errorf("want one line naming CAP_NET_ADMIN, got:\n%s", msg)
	}
	r := decodeOne(t, stdout.String())
	// The table is live, so the host's addresses are read too (no
	// capability needed).
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = string(s.Status)
	}
	if len(r.Findings) != 0 || status["host"] != "ok" || status["conntrack"] != "error" || status["kube"] != "ok" {
		t.Errorf("report = %+v", r)
	}
}
