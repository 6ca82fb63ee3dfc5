package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A file of the node's CNI configuration named to forge a line: collect
// says it left it out, on the one line, its name escaped.
func TestCollectEscapesWhatItNames(t *testing.T) {
	root := nodeWithCredentials(t)
	const forged = "x\x1b[31m\ncritical  forged-kubeconfig"
	if err := os.WriteFile(filepath.Join(root, "etc/cni/net.d", forged), []byte("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "b.tar.gz")
	_, _, errOut := run(t, "", "collect", "--host-root", root, "--node-name", "worker-1", "-f", bundle, "--timeout", "20s",
		"--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify")
	for _, r := range errOut {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Fatalf("stderr holds %q:\n%s", r, errOut)
		}
	}
	if want := `etc/cni/net.d/x\x1b[31m\ncritical  forged-kubeconfig`; !strings.Contains(errOut, want) {
		t.Errorf("stderr does not name %s:\n%s", want, errOut)
	}
}
