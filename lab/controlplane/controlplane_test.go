package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
)

func TestFindBinaries(t *testing.T) {
	t.Setenv(BinEnv, "")
	t.Setenv("GHOSTWATCH_KUBE_CACHE", t.TempDir()) // an empty build cache
	if _, err := FindBinaries(); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("unset: %v, want ErrNoBinaries", err)
	}
	dir := t.TempDir()
	for _, b := range Binaries[:len(Binaries)-1] {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(BinEnv, dir)
	last := Binaries[len(Binaries)-1]
	if _, err := FindBinaries(); err == nil || errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), last) {
		t.Errorf("without %s: %v, want an error naming it", last, err)
	}
	if err := os.WriteFile(filepath.Join(dir, last), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinaries(); err != nil || got != dir {
		t.Errorf("complete: %q, %v", got, err)
	}
}

func TestPKIServesLoopback(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.caPEM) {
		t.Fatal("CA not PEM")
	}
	b, err := os.ReadFile(p.certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"}); err == nil {
		t.Error("serving certificate valid for example.com")
	}
}

func TestCRDConditions(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
			map[string]any{"type": "Established", "status": "False", "reason": "Installing", "message": "the initial names have not been accepted"},
			"not a condition",
		}},
	}}
	got := crdConditions(obj)
	want := map[string]crdCondition{
		"NamesAccepted": {status: "True", reason: "NoConflicts"},
		"Established":   {status: "False", reason: "Installing", message: "the initial names have not been accepted"},
	}
	if !maps.Equal(got, want) {
		t.Errorf("crdConditions = %v, want %v", got, want)
	}
	if got := crdConditions(&unstructured.Unstructured{Object: map[string]any{}}); len(got) != 0 {
		t.Errorf("no status: %v, want none", got)
	}
}

func TestWriteKubeconfigFor(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{Dir: dir, Server: "https://127.0.0.1:6443", pki: p, tokens: map[string]string{UserKubeProxy: "t0k3n"}}
	plain, err := cp.WriteKubeconfig(UserKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	other, err := cp.WriteKubeconfigFor(UserKubeProxy, "https://127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	if plain == other {
		t.Fatalf("both kubeconfigs written to %s", plain)
	}
	for path, want := range map[string]string{plain: cp.Server, other: "https://127.0.0.1:7001"} {
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; got != want {
			t.Errorf("%s: server %s, want %s", filepath.Base(path), got, want)
		}
		if got := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token; got != "t0k3n" {
			t.Errorf("%s: token %q", filepath.Base(path), got)
		}
	}
	if _, err := cp.WriteKubeconfigFor(UserKubeProxy, "127.0.0.1:7001"); err == nil {
		t.Error("a server without a scheme was accepted")
	}
	if _, err := cp.WriteKubeconfigFor("nobody", "https://127.0.0.1:7001"); err == nil {
		t.Error("an unknown user was accepted")
	}
}
