package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
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

// maxAnalyzeRSS bounds the peak memory of analyze on a hostile bundle: a
// quarter of the controller's limit in the chart (1 GiB).
const maxAnalyzeRSS = 256 << 20

// A gzip bomb is read within bounds, and the error names the entry and the
// bound: a bundle of a few hundred KB whose objects hold a Pod with an
// annotation of 300 MB (analyze took 2.19 GB of it), and one whose
// manifest decompresses to more than any collect writes.
func TestAnalyzeBoundsAGzipBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a bundle that decompresses to 300 MB")
	}
	dir := t.TempDir()
	bomb := func(name string, entries map[string]io.Reader, sizes map[string]int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		gz, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
		tw := tar.NewWriter(gz)
		for _, n := range []string{bundleManifest, bundleObjects} {
			r, ok := entries[n]
			if !ok {
				continue
			}
			if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: sizes[n], Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(tw, r); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []io.Closer{tw, gz, f} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	manifest := `{"version": "dev", "node": "worker-1", "capturedAt": "2026-11-22T14:05:00Z", "collected": [], "notCollected": []}`
	head := `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "web", "name": "api-1", "uid": "u1", "annotations": {"a": "`
	tail := `"}}, "spec": {"nodeName": "worker-1"}, "status": {"phase": "Running", "podIP": "10.244.1.5"}}]}`
	const annotation = 300 << 20
	objects := io.MultiReader(strings.NewReader(head), io.LimitReader(repeat('x'), annotation), strings.NewReader(tail))
	annotated := bomb("annotation.tar.gz",
		map[string]io.Reader{bundleManifest: strings.NewReader(manifest), bundleObjects: objects},
		map[string]int64{bundleManifest: int64(len(manifest)), bundleObjects: int64(len(head) + annotation + len(tail))})
	bigManifest := bomb("manifest.tar.gz",
		map[string]io.Reader{bundleManifest: io.LimitReader(repeat(' '), 64<<20)},
		map[string]int64{bundleManifest: 64 << 20})
	if fi, err := os.Stat(annotated); err != nil || fi.Size() > 2<<20 {
		t.Fatalf("the bundle is %v bytes (%v): no bomb", fi.Size(), err)
	}
	exe := selfBinary(t)
	for _, tc := range []struct {
		bundle, want string
	}{
		{annotated, "cluster/objects.json:1: an object larger than 16 MiB"},
		{bigManifest, "bundle entry manifest.json: decompresses to more than 16 MiB"},
	} {
		cmd := exec.Command(exe, "analyze", tc.bundle)
		cmd.Env = append(os.Environ(), "GHOSTWATCH_RUN_MAIN=1", peakEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitError || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: %v, stderr %.500s; want %q", filepath.Base(tc.bundle), err, stderr.String(), tc.want)
		}
		rss := peakRSS(t, stderr.String())
		t.Logf("%s: peak RSS %d MiB", filepath.Base(tc.bundle), rss>>20)
		if rss > maxAnalyzeRSS {
			t.Errorf("%s: peak RSS %d MiB, more than %d MiB", filepath.Base(tc.bundle), rss>>20, maxAnalyzeRSS>>20)
		}
	}
}

// repeat reads c for ever.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}
