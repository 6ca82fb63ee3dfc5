package cli

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Credentials as a node holds them: a service account's token (a JWT) in
// Calico's kubeconfig and inline in its CNI configuration, a client key.
const (
	calicoJWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6InhZWjEyMyJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwic3ViIjoic3lzdGVtOnNlcnZpY2VhY2NvdW50Omt1YmUtc3lzdGVtOmNhbGljby1jbmktcGx1Z2luIn0.c2lnbmF0dXJlLW9mLXRoZS1jYWxpY28tdG9rZW4"
	inlineJWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a3ViZS1zeXN0ZW06Y2FsaWNvLW5vZGUifQ.aW5saW5lLXRva2VuLXNpZ25hdHVyZQ"
	clientKey = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdGVzdGtleQotLS0tLUVORCBSU0EgUFJJVkFURSBLRVktLS0tLQo="
)

// nodeWithCredentials writes a node's tree as Calico (with host-local
// IPAM, as Canal runs it) and Multus leave it: Calico's conflist naming
// the node and carrying an inline k8s_auth_token, its calico-kubeconfig,
// its etcd TLS key, Multus's kubeconfig in JSON, host-local's store and
// Calico's node name file.
func nodeWithCredentials(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"etc/cni/net.d/10-calico.conflist": `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "datastore_type": "kubernetes",
      "nodename": "worker-1",
      "mtu": 1440,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}]]},
      "policy": {"type": "k8s", "k8s_auth_token": "` + inlineJWT + `"},
      "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig", "k8s_api_root": "https://10.96.0.1:443"},
      "etcd_key_file": "/etc/cni/net.d/calico-tls/etcd-key",
      "credentials": {"user": "calico", "password": "hunter2-calico"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ]
}
`,
		"etc/cni/net.d/calico-kubeconfig": `# Kubeconfig file for Calico CNI plugin. Installed by calico/node.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://10.96.0.1:443
    certificate-authority-data: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUN5RENDQWJDZ0F3SUJBZ0lCQURBTgotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg=="
users:
- name: calico
  user:
    token: ` + calicoJWT + `
contexts:
- name: calico-context
  context:
    cluster: local
    user: calico
current-context: calico-context
`,
		"etc/cni/net.d/calico-tls/etcd-key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAtestkeynotarealone\n-----END RSA PRIVATE KEY-----\n",
		"etc/cni/net.d/multus.d/multus.kubeconfig": `{"apiVersion": "v1", "kind": "Config",
  "clusters": [{"name": "local", "cluster": {"server": "https://10.96.0.1:443"}}],
  "users": [{"name": "multus", "user": {"client-key-data": "` + clientKey + `"}}]}
`,
		"etc/cni/net.d/whereabouts.d/notes":                       "password = hunter2-notes\n",
		"var/lib/cni/networks/k8s-pod-network/10.244.1.5":         "4f1c2a9e8b7d\r\neth0",
		"var/lib/cni/networks/k8s-pod-network/last_reserved_ip.0": "10.244.1.5",
		"var/lib/cni/networks/k8s-pod-network/lock":               "",
		"var/lib/calico/nodename":                                 "worker-1",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// tokenShapes are what a credential looks like in any file: a JWT, a
// bearer token, a PEM private key, and the keys that name a credential
// with a value that is not REDACTED.
var tokenShapes = []*regexp.Regexp{
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.eyJ`),
	regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}`),
	regexp.MustCompile(`PRIVATE KEY`),
	regexp.MustCompile(`(?i)"?(token|k8s_auth_token|password|client-key-data|client-certificate-data|secret)"?\s*[:=]\s*"?(?:[^R\s",}]|R[^E])`),
	regexp.MustCompile(`hunter2|SECRETTOKEN|` + regexp.QuoteMeta(clientKey[:24])),
}

// A bundle collect wrote holds no credential: every byte of it,
// decompressed (names, headers, the manifest, every file), is free of
// token shapes and of the API server's address, though the node holds a
// kubeconfig with a service account's token, a conflist with one inline,
// a private key and a kubeconfig with a client key, and the API server
// was given with a token as its user name and could not be reached. The
// manifest says what was left out and what was redacted, and analyze
// still reads from the redacted conflist what it needs: Calico's node
// name and host-local's range.
func TestCollectedBundleHoldsNoCredential(t *testing.T) {
	root := nodeWithCredentials(t)
	bundle := filepath.Join(t.TempDir(), "b.tar.gz")
	code, _, errOut := run(t, "", "collect", "--host-root", root, "--node-name", "worker-1", "-f", bundle, "--timeout", "20s",
		"--server", "https://SECRETTOKEN@127.0.0.1:1", "--token", calicoJWT, "--insecure-skip-tls-verify")
	if code != ExitError {
		t.Fatalf("exit %d with the API server unreachable; stderr %s", code, errOut)
	}
	for _, re := range append(tokenShapes, regexp.MustCompile(`127\.0\.0\.1:1\b`)) {
		if m := re.FindString(errOut); m != "" {
			t.Errorf("stderr holds %q (%s):\n%s", m, re, errOut)
		}
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
	all, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range append(tokenShapes, regexp.MustCompile(`127\.0\.0\.1:1\b`)) {
		for _, loc := range re.FindAllIndex(all, -1) {
			from, to := max(0, loc[0]-80), min(len(all), loc[1]+80)
			t.Errorf("the bundle holds %q (%s) in: %q", all[loc[0]:loc[1]], re, all[from:to])
		}
	}

	files := map[string][]byte{}
	tr := tar.NewReader(strings.NewReader(string(all)))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	var m manifest
	if err := json.Unmarshal(files[bundleManifest], &m); err != nil {
		t.Fatal(err)
	}
	withheld := map[string]string{}
	for _, n := range m.NotCollected {
		if n.Withheld {
			withheld[n.What] = n.Why
		}
	}
	for _, p := range []string{"/etc/cni/net.d/calico-kubeconfig", "/etc/cni/net.d/calico-tls/etcd-key", "/etc/cni/net.d/multus.d/multus.kubeconfig", "/etc/cni/net.d/whereabouts.d/notes"} {
		if withheld[p] == "" {
			t.Errorf("%s is not said to be left out: %+v", p, m.NotCollected)
		}
		if _, ok := files["node/host"+p]; ok {
			t.Errorf("%s is in the bundle", p)
		}
	}
	var conflist *bundleFile
	for i := range m.Collected {
		if m.Collected[i].Path == "node/host/etc/cni/net.d/10-calico.conflist" {
			conflist = &m.Collected[i]
		}
	}
	want := []string{"plugins[0].policy.k8s_auth_token", "plugins[0].etcd_key_file", "plugins[0].credentials"}
	if conflist == nil || strings.Join(conflist.Redacted, " ") != strings.Join(want, " ") || !strings.Contains(conflist.What, "3 credentials redacted") {
		t.Errorf("the conflist's entry: %+v, want %v redacted", conflist, want)
	}
	for _, p := range []string{"node/host/var/lib/cni/networks/k8s-pod-network/10.244.1.5", "node/host/var/lib/calico/nodename"} {
		if _, ok := files[p]; !ok {
			t.Errorf("%s is not in the bundle", p)
		}
	}
	if !strings.Contains(string(files[bundleManifest]), "the API server is not reachable: connect: connection refused") {
		t.Errorf("the manifest does not say why the objects are missing:\n%s", files[bundleManifest])
	}

	// analyze reads Calico's node name and host-local's network from the
	// redacted conflist.
	code, out, errOut := run(t, "", "analyze", bundle, "-o", "json", "--rule", "stale-nodename-file,ipam-unbooked-ip")
	if code != ExitError {
		t.Errorf("analyze: exit %d without the cluster's objects; stderr %s", code, errOut)
	}
	r := decodeOne(t, out)
	status := map[string]string{}
	for _, s := range r.Sources {
		status[s.Name] = string(s.Status) + ": " + s.Detail
	}
	if !strings.HasPrefix(status["calico-node"], `ok: /etc/cni/net.d/10-calico.conflist names node "worker-1"`) {
		t.Errorf("calico-node: %s", status["calico-node"])
	}
	if !strings.HasPrefix(status["hostlocal"], "ok: ") || !strings.Contains(status["hostlocal"], "1 ") {
		t.Errorf("hostlocal: %s", status["hostlocal"])
	}
}

// A JSON file keeps its keys in their order; the value of every key that
// names a credential is REDACTED, at any depth, and its path said.
func TestRedactJSON(t *testing.T) {
	in := `{"b": 1, "a": [{"Token": {"x": 1}}, {"nested": {"client-certificate-data": "Y2VydA==", "ok": "<v>"}}], "SecretRef": null, "z": 2.50}`
	out, redacted, err := redactJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "b": 1,
  "a": [
    {
      "Token": "REDACTED"
    },
    {
      "nested": {
        "client-certificate-data": "REDACTED",
        "ok": "<v>"
      }
    }
  ],
  "SecretRef": "REDACTED",
  "z": 2.50
}
`
	if string(out) != want || strings.Join(redacted, " ") != "a[0].Token a[1].nested.client-certificate-data SecretRef" {
		t.Errorf("got %s %v", out, redacted)
	}
	plain := []byte(`{"name": "bridge", "type": "bridge"}` + "\n")
	if out, redacted, err := redactJSON(plain); err != nil || string(out) != string(plain) || redacted != nil {
		t.Errorf("a file with no credential changed: %s %v %v", out, redacted, err)
	}
	if _, _, err := redactJSON([]byte("password: x")); err == nil {
		t.Error("YAML read as JSON")
	}
}
