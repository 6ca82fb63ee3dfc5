package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeBinaries writes two small stand-ins for the built binaries.
func fakeBinaries(t *testing.T) []Binary {
	t.Helper()
	dir := t.TempDir()
	var bins []Binary
	for _, arch := range []string{"amd64", "arm64"} {
		path := filepath.Join(dir, arch, "ghostwatch")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		body := []byte("\x7fELF fake ghostwatch for linux/" + arch + "\n" + strings.Repeat(arch, 1000))
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, Binary{OS: "linux", Arch: arch, Path: path})
	}
	return bins
}

// readTar reads a tar into its regular files by name, and the names in order.
func readTar(t *testing.T, b []byte) (files map[string][]byte, headers []*tar.Header) {
	t.Helper()
	files = map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, h)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := files[h.Name]; dup {
			t.Errorf("%s twice in the tar", h.Name)
		}
		files[h.Name] = body
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// blob returns the blob d names, checking that its name is its digest and
// that d's size is its length.
func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	name := "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
	b, ok := files[name]
	if !ok {
		t.Fatalf("descriptor %s: no blob %s", d.Digest, name)
	}
	if d.Size != int64(len(b)) {
		t.Errorf("descriptor %s: size %d, blob is %d bytes", d.Digest, d.Size, len(b))
	}
	return b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

// The OCI image spec's JSON schemas (schema/*.json of image-spec v1.1),
// their required fields and patterns, checked by hand.
var (
	schemaMediaType = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$`)
	schemaDigest    = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
)

// checkSchema holds a document to the schema named: its required fields,
// schemaVersion 2, and every descriptor's mediaType, digest and size.
func checkSchema(t *testing.T, schema string, b []byte) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", schema, err)
	}
	required := func(m map[string]any, at string, fields ...string) {
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				t.Errorf("%s: %s lacks required %s in %s", schema, at, f, b)
			}
		}
	}
	descriptor := func(v any, at string) map[string]any {
		d, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %s is not an object", schema, at)
			return nil
		}
		required(d, at, "mediaType", "size", "digest")
		if mt, _ := d["mediaType"].(string); !schemaMediaType.MatchString(mt) {
			t.Errorf("%s: %s mediaType %q", schema, at, d["mediaType"])
		}
		if dg, _ := d["digest"].(string); !schemaDigest.MatchString(dg) {
			t.Errorf("%s: %s digest %q", schema, at, d["digest"])
		}
		if size, ok := d["size"].(float64); !ok || size < 0 || size != float64(int64(size)) {
			t.Errorf("%s: %s size %v", schema, at, d["size"])
		}
		return d
	}
	if schema != "image-layout" && schema != "config" {
		if v, _ := doc["schemaVersion"].(float64); v != 2 {
			t.Errorf("%s: schemaVersion %v, want 2", schema, doc["schemaVersion"])
		}
	}
	switch schema {
	case "image-layout":
		required(doc, "oci-layout", "imageLayoutVersion")
		if doc["imageLayoutVersion"] != "1.0.0" {
			t.Errorf("imageLayoutVersion %v, want 1.0.0", doc["imageLayoutVersion"])
		}
	case "image-index":
		required(doc, "index", "schemaVersion", "manifests")
		ms, _ := doc["manifests"].([]any)
		for i, m := range ms {
			d := descriptor(m, fmt.Sprintf("manifests[%d]", i))
			if p, ok := d["platform"]; ok {
				pm, _ := p.(map[string]any)
				required(pm, "platform", "architecture", "os")
			}
		}
	case "image-manifest":
		required(doc, "manifest", "schemaVersion", "config", "layers")
		descriptor(doc["config"], "config")
		layers, _ := doc["layers"].([]any)
		if len(layers) < 1 {
			t.Errorf("manifest: layers %v, want at least one", doc["layers"])
		}
		for _, l := range layers {
			descriptor(l, "layer")
		}
	case "config":
		required(doc, "config", "architecture", "os", "rootfs")
		rootfs, _ := doc["rootfs"].(map[string]any)
		required(rootfs, "rootfs", "diff_ids", "type")
		if rootfs["type"] != "layers" {
			t.Errorf("config: rootfs.type %v, want layers", rootfs["type"])
		}
	default:
		t.Fatalf("no schema %s", schema)
	}
}

func TestWriteImageLayout(t *testing.T) {
	bins := fakeBinaries(t)
	var out bytes.Buffer
	indexDigest, err := Write(&out, "v0.1.0", bins)
	if err != nil {
		t.Fatal(err)
	}
	files, headers := readTar(t, out.Bytes())
	for _, h := range headers {
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, mtime %v; want 0:0 at 1970-01-01", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}

	checkSchema(t, "image-layout", files["oci-layout"])
	var layout Layout
	decode(t, files["oci-layout"], &layout)

	checkSchema(t, "image-index", files["index.json"])
	var top Index
	decode(t, files["index.json"], &top)
	if top.MediaType != MediaTypeIndex || len(top.Manifests) != 1 {
		t.Fatalf("index.json %+v: want one image index", top)
	}
	ref := top.Manifests[0]
	if ref.MediaType != MediaTypeIndex || ref.Digest != indexDigest {
		t.Errorf("index.json names %s %s, want %s %s (what Write returned)", ref.MediaType, ref.Digest, MediaTypeIndex, indexDigest)
	}
	if ref.Annotations[AnnotationRefName] != "v0.1.0" || ref.Annotations[AnnotationImage] != "ghcr.io/ghostwatch/ghostwatch:v0.1.0" {
		t.Errorf("index.json annotations %v: want ref.name v0.1.0 and the image's name", ref.Annotations)
	}

	indexBlob := blob(t, files, ref)
	checkSchema(t, "image-index", indexBlob)
	var index Index
	decode(t, indexBlob, &index)
	wantAnnotations := map[string]string{
		AnnotationVersion:  "v0.1.0",
		AnnotationSource:   "https://github.com/ghostwatch/ghostwatch",
		AnnotationLicenses: "Apache-2.0",
		AnnotationTitle:    "ghostwatch",
	}
	sameMap(t, "index annotations", index.Annotations, wantAnnotations)
	if len(index.Manifests) != len(bins) {
		t.Fatalf("index has %d manifests, want %d", len(index.Manifests), len(bins))
	}

	for i, bin := range bins {
		t.Run(bin.Platform(), func(t *testing.T) {
			d := index.Manifests[i]
			if d.MediaType != MediaTypeManifest {
				t.Errorf("manifest media type %s, want %s", d.MediaType, MediaTypeManifest)
			}
			if d.Platform == nil || d.Platform.OS != bin.OS || d.Platform.Architecture != bin.Arch {
				t.Errorf("manifest platform %+v, want %s", d.Platform, bin.Platform())
			}
			mb := blob(t, files, d)
			checkSchema(t, "image-manifest", mb)
			var m Manifest
			decode(t, mb, &m)
			if m.MediaType != MediaTypeManifest || m.Config.MediaType != MediaTypeConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeLayer {
				t.Fatalf("manifest %+v: want an OCI manifest of one config and one gzip layer", m)
			}
			sameMap(t, "manifest annotations", m.Annotations, wantAnnotations)

			cb := blob(t, files, m.Config)
			checkSchema(t, "config", cb)
			var c Config
			decode(t, cb, &c)
			if c.OS != bin.OS || c.Architecture != bin.Arch {
				t.Errorf("config platform %s/%s, want %s", c.OS, c.Architecture, bin.Platform())
			}
			if c.Config.User != "65532:65532" || len(c.Config.Entrypoint) != 1 || c.Config.Entrypoint[0] != "/ghostwatch" {
				t.Errorf("config runs %v as %q, want [/ghostwatch] as 65532:65532", c.Config.Entrypoint, c.Config.User)
			}
			sameMap(t, "config labels", c.Config.Labels, wantAnnotations)

			zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
			if err != nil {
				t.Fatal(err)
			}
			layer, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if c.RootFS.Type != "layers" || len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0] != sha(layer) {
				t.Errorf("rootfs %+v, want the one diff_id %s (the uncompressed layer's)", c.RootFS, sha(layer))
			}
			lfiles, lheaders := readTar(t, layer)
			if len(lheaders) != 1 || len(lfiles) != 1 {
				t.Fatalf("layer holds %d entries, want exactly ghostwatch", len(lheaders))
			}
			h := lheaders[0]
			if h.Name != "ghostwatch" || h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
				t.Errorf("layer entry %s type %c mode %o owner %d:%d mtime %v; want ghostwatch, a file, 0755, 0:0, 1970-01-01",
					h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime)
			}
			want, err := os.ReadFile(bin.Path)
			if err != nil {
				t.Fatal(err)
			}
			if sha(lfiles["ghostwatch"]) != sha(want) {
				t.Errorf("the layer's ghostwatch is not %s", bin.Path)
			}
		})
	}

	// Every blob is named by its digest, and every one is referred to.
	var blobs int
	for name, b := range files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			blobs++
			if "sha256:"+hexDigest != sha(b) {
				t.Errorf("blob %s holds content of digest %s", name, sha(b))
			}
		}
	}
	if want := 1 + 3*len(bins); blobs != want {
		t.Errorf("%d blobs, want %d (the index, and a manifest, config and layer per platform)", blobs, want)
	}
}

func sameMap(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s %v, want %v", what, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %v, want %v", what, got, want)
			return
		}
	}
}

func TestWriteIsReproducible(t *testing.T) {
	bins := fakeBinaries(t)
	dir := t.TempDir()
	var digests []string
	var bodies [][]byte
	for _, name := range []string{"a.oci.tar", "b.oci.tar"} {
		path := filepath.Join(dir, name)
		d, err := WriteFile(path, "v0.1.0", bins)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		digests, bodies = append(digests, d), append(bodies, b)
	}
	if digests[0] != digests[1] || !bytes.Equal(bodies[0], bodies[1]) {
		t.Errorf("two writes of the same binaries differ: %s and %s", digests[0], digests[1])
	}
	// Another binary, another image.
	if err := os.WriteFile(bins[1].Path, []byte("another build"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if d, err := Write(&out, "v0.1.0", bins); err != nil || d == digests[0] {
		t.Errorf("another arm64 binary: digest %s, %v; want one other than %s", d, err, digests[0])
	}
}

func TestWriteRefuses(t *testing.T) {
	bins := fakeBinaries(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "ghostwatch")
	for _, tc := range []struct {
		name    string
		version string
		bins    []Binary
		want    string
	}{
		{"no v prefix", "0.1.0", bins, `version "0.1.0": a semantic version with a v prefix`},
		{"not a version", "latest", bins, `version "latest"`},
		{"build metadata, not a tag", "v0.1.0+abc", bins, "not a valid image tag"},
		{"no binary", "v0.1.0", nil, "no binary"},
		{"a missing binary", "v0.1.0", []Binary{bins[0], {OS: "linux", Arch: "arm64", Path: missing}}, "binary linux/arm64 " + missing + ": open " + missing + ": no such file"},
		{"a directory", "v0.1.0", []Binary{{OS: "linux", Arch: "amd64", Path: dir}}, dir + " is not a regular file"},
		{"an empty file", "v0.1.0", []Binary{{OS: "linux", Arch: "amd64", Path: empty}}, empty + " is empty"},
		{"one platform twice", "v0.1.0", []Binary{bins[0], bins[0]}, "a second binary for linux/amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Write(&out, tc.version, tc.bins)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	// A file this user cannot read (root reads any, so it is not one there).
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked")
		if err := os.WriteFile(locked, []byte("x"), 0o000); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(io.Discard, "v0.1.0", []Binary{{OS: "linux", Arch: "amd64", Path: locked}}); err == nil || !strings.Contains(err.Error(), locked+": permission denied") {
			t.Errorf("an unreadable binary: %v, want permission denied naming %s", err, locked)
		}
	}
	// A refused write leaves no file behind.
	out := filepath.Join(dir, "image.oci.tar")
	if _, err := WriteFile(out, "v0.1.0", []Binary{{OS: "linux", Arch: "amd64", Path: missing}}); err == nil {
		t.Error("WriteFile of a missing binary: no error")
	}
	if entries, _ := filepath.Glob(out + "*"); len(entries) != 0 {
		t.Errorf("a refused write left %v", entries)
	}
}

func TestParseBinary(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want Binary
		err  bool
	}{
		{"linux/amd64=dist/amd64/ghostwatch", Binary{OS: "linux", Arch: "amd64", Path: "dist/amd64/ghostwatch"}, false},
		{"linux/arm64=/tmp/a=b", Binary{OS: "linux", Arch: "arm64", Path: "/tmp/a=b"}, false},
		{"linux/amd64", Binary{}, true},
		{"linux=ghostwatch", Binary{}, true},
		{"linux/amd64=", Binary{}, true},
		{"Linux/AMD64=ghostwatch", Binary{}, true},
	} {
		got, err := ParseBinary(tc.arg)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseBinary(%q) = %+v, %v; want %+v, error %v", tc.arg, got, err, tc.want, tc.err)
		}
	}
}
