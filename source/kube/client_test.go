package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
)

func TestClientFromFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", "")
	kc := filepath.Join(dir, "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://10.0.0.1:6443"}
- name: b
  cluster: {server: "https://kube.example.com/k8s/clusters/c-42"}
users:
- name: u
  user: {token: abc}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u}
current-context: a
`), 0o600); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name  string
		flags func(f *genericclioptions.ConfigFlags)
		want  string // server URL, or the error
		isErr bool
	}{
		{"current context", func(f *genericclioptions.ConfigFlags) { f.KubeConfig = str(kc) }, "https://10.0.0.1:6443", false},
		{"--context", func(f *genericclioptions.ConfigFlags) { f.KubeConfig = str(kc); f.Context = str("b") }, "https://kube.example.com/k8s/clusters/c-42", false},
		{"--server", func(f *genericclioptions.ConfigFlags) {
			f.KubeConfig = str(kc)
			f.APIServer = str("https://127.0.0.1:7443")
		}, "https://127.0.0.1:7443", false},
		{"$KUBECONFIG", func(f *genericclioptions.ConfigFlags) { os.Setenv("KUBECONFIG", kc) }, "https://10.0.0.1:6443", false},
		{"unknown context", func(f *genericclioptions.ConfigFlags) { f.KubeConfig = str(kc); f.Context = str("zz") }, `kubeconfig: context "zz" does not exist`, true},
		{"missing kubeconfig", func(f *genericclioptions.ConfigFlags) { f.KubeConfig = str(filepath.Join(dir, "nope")) }, filepath.Join(dir, "nope"), true},
		{"nothing configured", func(f *genericclioptions.ConfigFlags) {}, "no Kubernetes configuration: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a pod; pass --kubeconfig or --server, or read saved objects with --kube-objects", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			f := genericclioptions.NewConfigFlags(false)
			tc.flags(f)
			client, server, err := ClientFromFlags(f)
			if tc.isErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error = %v, want it to contain %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if server != tc.want {
				t.Errorf("server = %q, want %q", server, tc.want)
			}
			if got := ServerURL(client); got != tc.want {
				t.Errorf("ServerURL(client) = %q, want %q", got, tc.want)
			}
		})
	}
}
