package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/internal/release/oci"
)

func readTar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = body
	}
}

func blob(t *testing.T, files map[string][]byte, d oci.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("no blob %s", d.Digest)
	}
	sum := sha256.Sum256(b)
	if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest or size does not match its descriptor", d.Digest)
	}
	return b
}

// Each image is a manifest of index.json named for containerd by its ref,
// its one layer holding the files at their names with their bytes, its
// config naming the entrypoint and the layer's diff ID; the same files
// give the same archive.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("\x7fELF a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := []Image{
		{Ref: "lab.ghostwatch.io/pause:1", Entrypoint: []string{"/prog", "pause"}, Files: []File{{Name: "prog", Path: bin}}},
		{Ref: "localhost:5000/lab/web:2", Entrypoint: []string{"/bin/prog"}, User: "65532", Files: []File{{Name: "bin/prog", Path: bin}}},
	}
	var a, b bytes.Buffer
	if err := Write(&a, images...); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, images...); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same images gave two archives")
	}
	files := readTar(t, a.Bytes())
	var index oci.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != len(images) {
		t.Fatalf("%d manifests, want %d", len(index.Manifests), len(images))
	}
	for i, d := range index.Manifests {
		img := images[i]
		if d.Annotations[oci.AnnotationImage] != img.Ref || !strings.HasSuffix(img.Ref, ":"+d.Annotations[oci.AnnotationRefName]) {
			t.Errorf("manifest %d named %v, want %s", i, d.Annotations, img.Ref)
		}
		var m oci.Manifest
		if err := json.Unmarshal(blob(t, files, d), &m); err != nil {
			t.Fatal(err)
		}
		var c oci.Config
		if err := json.Unmarshal(blob(t, files, m.Config), &c); err != nil {
			t.Fatal(err)
		}
		if strings.Join(c.Config.Entrypoint, " ") != strings.Join(img.Entrypoint, " ") || c.Config.User != img.User || c.OS != "linux" {
			t.Errorf("%s: config %+v", img.Ref, c.Config)
		}
		gz, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(gz)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		if c.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("%s: diff ID %s is not the layer's", img.Ref, c.RootFS.DiffIDs[0])
		}
		layer := readTar(t, raw)
		if got := string(layer[img.Files[0].Name]); got != "\x7fELF a program" {
			t.Errorf("%s: layer holds %q at %s", img.Ref, got, img.Files[0].Name)
		}
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		img  Image
		want string
	}{
		{Image{Ref: "lab.ghostwatch.io/pause", Entrypoint: []string{"/prog"}, Files: []File{{Name: "prog", Path: bin}}}, "want a name with a tag"},
		{Image{Ref: "localhost:5000/pause", Entrypoint: []string{"/prog"}, Files: []File{{Name: "prog", Path: bin}}}, "want a name with a tag"},
		{Image{Ref: "a:1", Files: []File{{Name: "prog", Path: bin}}}, "no entrypoint"},
		{Image{Ref: "a:1", Entrypoint: []string{"/prog"}}, "no file"},
		{Image{Ref: "a:1", Entrypoint: []string{"/prog"}, Files: []File{{Name: "../prog", Path: bin}}}, "relative to the image's root"},
		{Image{Ref: "a:1", Entrypoint: []string{"/prog"}, Files: []File{{Name: "prog", Path: dir}}}, "not a regular file"},
		{Image{Ref: "a:1", Entrypoint: []string{"/prog"}, Files: []File{{Name: "prog", Path: filepath.Join(dir, "none")}}}, "no such file"},
	} {
		err := Write(io.Discard, c.img)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.img, err, c.want)
		}
	}
	if err := Write(io.Discard); err == nil {
		t.Error("no image: no error")
	}
}
