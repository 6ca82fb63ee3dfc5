package hostlocal

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// What a node's store says of an address: reserved, for which container;
// an address of the range not reserved; an address of no range: nothing.
func TestAtAnAddress(t *testing.T) {
	root := t.TempDir()
	for name, data := range map[string]string{
		"etc/cni/net.d/10-kindnet.conflist":             `{"cniVersion":"0.4.0","name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","dataDir":"/run/cni-ipam-state","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`,
		"run/cni-ipam-state/kindnet/10.244.2.2":         "sandbox-web-0\r\neth0",
		"run/cni-ipam-state/kindnet/last_reserved_ip.0": "10.244.2.2",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ip       string
		networks int
		reserved bool
		id       string
	}{
		{"10.244.2.2", 1, true, "sandbox-web-0"},
		{"10.244.2.3", 1, false, ""},
		{"10.245.0.1", 0, false, ""},
	} {
		at, err := At(context.Background(), root, netip.MustParseAddr(tc.ip))
		if err != nil {
			t.Fatal(err)
		}
		if len(at.Networks) != tc.networks || (tc.networks > 0 && (at.Networks[0].Reserved != tc.reserved || at.Networks[0].ContainerID != tc.id || at.Networks[0].Dir != "/run/cni-ipam-state/kindnet")) {
			t.Errorf("%s: %+v", tc.ip, at)
		}
	}
	if at, err := At(context.Background(), t.TempDir(), netip.MustParseAddr("10.244.2.2")); err != nil || len(at.Networks) != 0 {
		t.Errorf("a node without host-local: %+v, %v", at, err)
	}
}
