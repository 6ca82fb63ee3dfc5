package nodefs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCNIConfigsInTheKubeletsOrder(t *testing.T) {
	root := t.TempDir()
	if got, err := CNIConfigs(root); err != nil || got != nil {
		t.Errorf("no directory: %v, %v; want none and no error", got, err)
	}
	dir := filepath.Join(root, "etc/cni/net.d")
	for _, name := range []string{"99-loopback.conf", "10-calico.conflist", "20-x.json", "README", "10-calico.conflist.bak", "sub.conf/"} {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := CNIConfigs(root)
	want := []string{"/etc/cni/net.d/10-calico.conflist", "/etc/cni/net.d/20-x.json", "/etc/cni/net.d/99-loopback.conf"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("CNIConfigs = %v, %v; want %v", got, err, want)
	}
}

func TestReadFileIsBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, MaxFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p); err != nil || len(b) != MaxFile {
		t.Errorf("at the bound: %d bytes, %v", len(b), err)
	}
	if err := os.WriteFile(p, make([]byte, MaxFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("over the bound: %v", err)
	}
}
