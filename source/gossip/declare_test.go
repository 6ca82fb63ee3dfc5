package gossip

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestParseDeclarations(t *testing.T) {
	d, err := ParseDeclarations([]byte(`
clusters:
- system: consul
  namespace: shop
  scheme: https
  tokenSecret: {name: consul-acl, key: token}
- system: serf
  namespace: shop
  name: mesh
  tokenFile: /etc/ghostwatch/serf/key
  allowPlaintextCredentials: true
- system: memberlist
  namespace: web
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Find(snapshot.GossipCluster{System: "serf", Cluster: "shop/mesh"}); got == nil || got.TokenFile != "/etc/ghostwatch/serf/key" {
		t.Errorf("shop/mesh (serf): %+v", got)
	}
	if got := d.Find(snapshot.GossipCluster{System: "serf", Cluster: "shop/serf"}); got != nil {
		t.Errorf("a cluster not declared found: %+v", got)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"clusters: []", "no cluster declared"},
		{"clusters: [{system: consul, namespace: shop, token: x}]", `unknown field "token"`},
		{"clusters: [{system: zookeeper, namespace: shop}]", `system "zookeeper": want consul, serf or memberlist`},
		{"clusters: [{system: consul, namespace: Shop}]", `namespace "Shop"`},
		{"clusters: [{system: consul, namespace: shop, name: ../x}]", `name "../x"`},
		{"clusters: [{system: consul, namespace: shop, scheme: ftp}]", `scheme "ftp"`},
		{"clusters: [{system: consul, namespace: shop, scheme: http, tokenFile: /t}]", "the ACL token would travel in clear text"},
		{"clusters: [{system: serf, namespace: shop, tokenFile: /t}]", "serf's RPC has no TLS"},
		{"clusters: [{system: serf, namespace: shop, scheme: https}]", "serf's RPC has no TLS: scheme"},
		{"clusters: [{system: memberlist, namespace: shop, tokenFile: /t}]", "memberlist's member list takes no credential"},
		{"clusters: [{system: consul, namespace: shop, tokenFile: /t, tokenSecret: {name: a, key: b}}]", "give one"},
		{"clusters: [{system: consul, namespace: shop, tokenSecret: {name: a}}]", "tokenSecret: give its name and key"},
		{"clusters: [{system: consul, namespace: shop, caFile: /nonexistent}]", "caFile"},
		{"clusters: [{system: consul, namespace: shop}, {system: consul, namespace: shop, name: consul}]", "clusters[1]: shop/consul (consul) is declared twice"},
	} {
		if _, err := ParseDeclarations([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestReadDeclarationsRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadDeclarations(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadDeclarations(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("no file: %v", err)
	}
	f := filepath.Join(dir, "clusters.yaml")
	os.WriteFile(f, []byte("clusters: [{system: consul, namespace: shop}]\n"), 0o644)
	if d, err := ReadDeclarations(f); err != nil || len(d.Clusters) != 1 {
		t.Errorf("%+v, %v", d, err)
	}
}

func FuzzParseDeclarations(f *testing.F) {
	f.Add([]byte("clusters: [{system: consul, namespace: shop, scheme: https, tokenSecret: {name: a, key: b}}]"))
	f.Add([]byte(`{"clusters": [{"system": "serf", "namespace": "x", "allowPlaintextCredentials": true, "tokenFile": "/k"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDeclarations(b)
		if err != nil {
			return
		}
		seen := map[snapshot.GossipCluster]bool{}
		for i := range d.Clusters {
			c := &d.Clusters[i]
			if err := c.check(); err != nil {
				t.Fatalf("accepted a declaration its own check refuses: %v", err)
			}
			if seen[c.Key()] {
				t.Fatalf("accepted %v twice", c.Key())
			}
			seen[c.Key()] = true
		}
	})
}
