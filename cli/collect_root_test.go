package cli

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// collect copies the node's files as the node sees them: a parent
// directory linked out of the host root (var -> an absolute path of this
// machine's) is resolved inside the root, and what this machine holds
// there never reaches the bundle; a directory linked inside the root
// (etc/cni/net.d -> /data/cni-conf) is followed as the node follows it.
func TestCollectStaysInsideTheHostRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "lib/calico"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "lib/calico/nodename"), []byte("this-machine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc/cni", "data/cni-conf"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A parent directory, var, links to this machine's outside.
	if err := os.Symlink(outside, filepath.Join(root, "var")); err != nil {
		t.Fatal(err)
	}
	// On the node, /etc/cni/net.d is a link to /data/cni-conf.
	if err := os.WriteFile(filepath.Join(root, "data/cni-conf/10-net.conflist"), []byte(`{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/data/cni-conf", filepath.Join(root, "etc/cni/net.d")); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "b.tar.gz")
	code, _, errOut := run(t, "", "collect", "--host-root", root, "--node-name", "worker-1", "-f", bundle, "--timeout", "5s",
		"--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify")
	if code != ExitError {
		t.Fatalf("exit %d with the API server unreachable; stderr %s", code, errOut)
	}
	f, err := os.Open(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		names[h.Name] = string(b)
		if strings.Contains(string(b), "this-machine") && h.Name != bundleManifest {
			t.Errorf("%s holds this machine's file, read out of the host root", h.Name)
		}
	}
	if _, ok := names["node/host/var/lib/calico/nodename"]; ok {
		t.Error("var/lib/calico/nodename was read through a link out of the host root")
	}
	if _, ok := names["node/host/etc/cni/net.d/10-net.conflist"]; !ok {
		t.Errorf("the conflist behind a link inside the root is not in the bundle: %v", keys(names))
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
