package caliconode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

func node(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const calicoList = `{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico","log_level":"info",
 "datastore_type":"kubernetes","nodename":"%s","ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func collect(t *testing.T, root string) (*snapshot.CalicoNode, error) {
	t.Helper()
	s := &snapshot.Snapshot{}
	err := (&Source{Root: root}).Collect(context.Background(), s)
	if err != nil && s.CalicoNode != nil {
		t.Errorf("failed (%v) but set the snapshot", err)
	}
	return s.CalicoNode, err
}

func TestCollect(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/10-calico.conflist": strings.Replace(calicoList, `"nodename":"%s",`, "", 1),
		"etc/cni/net.d/99-loopback.conf":   `{"name":"lo","type":"loopback"}`,
		"var/lib/calico/nodename":          "10-199-0-21",
	})
	n, err := collect(t, root)
	if err != nil {
		t.Fatal(err)
	}
	if n.Config != "/etc/cni/net.d/10-calico.conflist" || !n.ConfigInUse || n.ConfNodename != "" ||
		n.NodenameFile != DefaultNodename || !n.FileExists || n.FileNodename != "10-199-0-21" || n.FileModified.IsZero() {
		t.Errorf("read %+v", n)
	}
	if d := (&Source{}).Describe(&snapshot.Snapshot{CalicoNode: n}); d != `/var/lib/calico/nodename holds "10-199-0-21" (/etc/cni/net.d/10-calico.conflist names no node)` {
		t.Errorf("Describe = %q", d)
	}
}

// The configuration's nodename and its own nodename_file; a configuration
// that is not the kubelet's first; the file's content kept as is.
func TestCollectConfigured(t *testing.T) {
	root := node(t, map[string]string{
		"etc/cni/net.d/05-other.conf":      `{"name":"other","type":"bridge"}`,
		"etc/cni/net.d/10-calico.conflist": strings.Replace(calicoList, `"nodename":"%s"`, `"nodename":"node-b","nodename_file":"/etc/calico/name"`, 1),
		"etc/calico/name":                  "node-b\n",
	})
	n, err := collect(t, root)
	if err != nil {
		t.Fatal(err)
	}
	if n.ConfigInUse || n.ConfNodename != "node-b" || n.NodenameFile != "/etc/calico/name" || n.FileNodename != "node-b\n" {
		t.Errorf("read %+v", n)
	}
}

func TestCollectErrors(t *testing.T) {
	noFileDir := node(t, map[string]string{"etc/cni/net.d/10-calico.conflist": strings.Replace(calicoList, `"nodename":"%s",`, "", 1)})
	if _, err := collect(t, noFileDir); err == nil || !strings.Contains(err.Error(), "/var/lib/calico is missing too, so it is most likely not mounted") {
		t.Errorf("nodename file's directory not mounted: %v", err)
	}
	noFile := node(t, map[string]string{
		"etc/cni/net.d/10-calico.conflist": strings.Replace(calicoList, `"nodename":"%s",`, "", 1),
		"var/lib/calico/mtu":               "1440",
	})
	if n, err := collect(t, noFile); err != nil || n.FileExists {
		t.Errorf("no nodename file yet (calico-node has not started): %+v, %v", n, err)
	}
	bad := node(t, map[string]string{"etc/cni/net.d/10-calico.conflist": `{"name": `})
	if _, err := collect(t, bad); err == nil || !strings.Contains(err.Error(), "10-calico.conflist is not valid JSON") {
		t.Errorf("garbage configuration: %v", err)
	}
	flannel := node(t, map[string]string{"etc/cni/net.d/10-flannel.conflist": `{"name":"cbr0","plugins":[{"type":"flannel"}]}`})
	if _, err := collect(t, flannel); !errors.Is(err, source.ErrUnsupported) {
		t.Errorf("no calico plugin: %v, want unsupported", err)
	}
	if _, err := collect(t, "/nonexistent/host"); err == nil || !strings.Contains(err.Error(), "host root /nonexistent/host") {
		t.Errorf("no root: %v", err)
	}
}

func FuzzCalicoConf(f *testing.F) {
	f.Add([]byte(calicoList))
	f.Add([]byte(`{"type":"calico","nodename":"a"}`))
	f.Add([]byte(`{"plugins":[{"type":"calico","nodename":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok, err := calicoConf(b)
		if err == nil && ok && c.Type != "calico" {
			t.Errorf("calico plugin of type %q", c.Type)
		}
	})
}

// The nodename file's directory linked elsewhere: followed inside the host
// root, as the node follows it on its own /, never to this host's files
// (where the link's target held another node's name).
func TestCollectParentLinkStaysInTheRoot(t *testing.T) {
	conf := strings.Replace(calicoList, `"nodename":"%s",`, "", 1)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "nodename"), []byte("another-node"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := node(t, map[string]string{"etc/cni/net.d/10-calico.conflist": conf, "var/lib/.keep": ""})
	if err := os.Symlink(outside, filepath.Join(out, "var/lib/calico")); err != nil {
		t.Fatal(err)
	}
	if n, err := collect(t, out); err == nil || !strings.Contains(err.Error(), "/var/lib/calico is missing too, so it is most likely not mounted") {
		t.Errorf("a parent linked out of the root: %+v, %v; want the file not found under the root", n, err)
	}
	in := node(t, map[string]string{"etc/cni/net.d/10-calico.conflist": conf, "data/calico/nodename": "node-a"})
	os.MkdirAll(filepath.Join(in, "var/lib"), 0o755)
	if err := os.Symlink("/data/calico", filepath.Join(in, "var/lib/calico")); err != nil {
		t.Fatal(err)
	}
	if n, err := collect(t, in); err != nil || n.FileNodename != "node-a" || n.FileModified.IsZero() {
		t.Errorf("a parent linked within the root: %+v, %v; want node-a", n, err)
	}
}
