package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTar writes a tar.gz of entries (name, type, body) to a file.
func writeTar(t *testing.T, entries ...tar.Header) string {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname, h.Size = "", int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	gz.Close()
	p := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A bundle is unpacked only when it is one: regular files under its own
// directory, a manifest naming a node and a time; anything else is refused
// with what is wrong, and nothing is written outside.
func TestAnalyzeRefusesWhatIsNoBundle(t *testing.T) {
	reg := func(name, body string) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Linkname: body}
	}
	good := reg(bundleManifest, `{"node":"node-1","capturedAt":"2026-11-26T15:00:00Z"}`)
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"a way out", []tar.Header{good, reg("../../etc/cron.d/x", "boom")}, "lies outside the bundle"},
		{"an absolute path", []tar.Header{good, reg("/etc/passwd", "boom")}, "lies outside the bundle"},
		{"a symbolic link", []tar.Header{good, {Name: "node/host/etc/cni/net.d/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}}, "is not a regular file"},
		{"no manifest", []tar.Header{reg("node/conntrack.txt", "")}, "no manifest.json"},
		{"a manifest of nothing", []tar.Header{reg(bundleManifest, `{}`)}, "names no node or capture time"},
	} {
		dir := t.TempDir()
		_, err := unpackBundle(writeTar(t, tc.entries...), dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	notGzip := filepath.Join(t.TempDir(), "x.tar.gz")
	os.WriteFile(notGzip, []byte("plain text"), 0o644)
	if _, err := unpackBundle(notGzip, t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a bundle ghostwatch collect wrote") {
		t.Errorf("not gzip: %v", err)
	}
	m, err := unpackBundle(writeTar(t, good, reg("cluster/objects.json", `{"apiVersion":"v1","kind":"List","items":[]}`)), t.TempDir())
	if err != nil || m.Node != "node-1" {
		t.Errorf("a bundle: %+v, %v", m, err)
	}
}
