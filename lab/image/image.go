// Package image writes the lab's container images as an OCI archive (an
// OCI image layout in one tar file) that a real container runtime imports
// without a registry: `ctr -n k8s.io images import FILE` names each image
// by its io.containerd.image.name annotation. Each image is one layer of
// files copied from the host (static binaries), for linux on this
// machine's architecture, byte for byte the same for the same files.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/release/oci"
)

// File is one file of an image: Path on the host, Name in the image
// (relative to its root, such as "labpod").
type File struct {
	Name, Path string
	// Mode is its permission bits (default 0755).
	Mode int64
}

// Image is one image of an archive.
type Image struct {
	// Ref is its full name with a tag, as a pod's image names it:
	// "lab.ghostwatch.io/pause:1".
	Ref        string
	Entrypoint []string
	// User runs the entrypoint ("" is root, as the image spec says).
	User  string
	Files []File
}

// epoch is every file's modification time.
var epoch = time.Unix(0, 0).UTC()

// WriteFile writes the images to path as an OCI archive, whole or not at
// all.
func WriteFile(path string, images ...Image) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = Write(tmp, images...)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Write writes the images to w as an OCI archive: index.json lists one
// manifest per image, named by its Ref.
func Write(w io.Writer, images ...Image) error {
	if len(images) == 0 {
		return errors.New("no image to write")
	}
	blobs := map[string][]byte{}
	put := func(mediaType string, b []byte) oci.Descriptor {
		d := oci.Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
		blobs[d.Digest] = b
		return d
	}
	index := oci.Index{SchemaVersion: 2, MediaType: oci.MediaTypeIndex}
	for _, img := range images {
		i := strings.LastIndex(img.Ref, ":")
		name, tag := img.Ref[:max(i, 0)], img.Ref[i+1:]
		if i < 0 || name == "" || tag == "" || strings.Contains(tag, "/") {
			return fmt.Errorf("image %q: want a name with a tag, such as lab.ghostwatch.io/pause:1", img.Ref)
		}
		if len(img.Entrypoint) == 0 {
			return fmt.Errorf("image %s: no entrypoint", img.Ref)
		}
		layer, diffID, err := layerOf(img.Files)
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Ref, err)
		}
		var c oci.Config
		c.Architecture, c.OS = runtime.GOARCH, "linux"
		c.Config.User, c.Config.Entrypoint = img.User, img.Entrypoint
		c.RootFS.Type, c.RootFS.DiffIDs = "layers", []string{diffID}
		m := oci.Manifest{
			SchemaVersion: 2,
			MediaType:     oci.MediaTypeManifest,
			Config:        put(oci.MediaTypeConfig, marshal(c)),
			Layers:        []oci.Descriptor{put(oci.MediaTypeLayer, layer)},
		}
		d := put(oci.MediaTypeManifest, marshal(m))
		d.Platform = &oci.Platform{Architecture: runtime.GOARCH, OS: "linux"}
		d.Annotations = map[string]string{oci.AnnotationRefName: tag, oci.AnnotationImage: img.Ref}
		index.Manifests = append(index.Manifests, d)
	}
	files := []struct {
		name string
		body []byte
	}{
		{"oci-layout", marshal(oci.Layout{ImageLayoutVersion: oci.LayoutVersion})},
		{"index.json", marshal(index)},
	}
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		files = append(files, struct {
			name string
			body []byte
		}{"blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), blobs[d]})
	}
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(dir, tar.TypeDir, 0o755, 0)); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(header(f.name, tar.TypeReg, 0o644, int64(len(f.body)))); err != nil {
			return err
		}
		if _, err := tw.Write(f.body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layerOf is the gzip layer holding files, and its diff ID (the digest of
// the uncompressed tar).
func layerOf(files []File) (layer []byte, diffID string, err error) {
	if len(files) == 0 {
		return nil, "", errors.New("no file")
	}
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, "", err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(uncompressed, gz))
	// Every image has /tmp, writable, for what its programs write.
	if err := tw.WriteHeader(header("tmp/", tar.TypeDir, 0o1777, 0)); err != nil {
		return nil, "", err
	}
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := gz.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)), nil
}

func addFile(tw *tar.Writer, f File) error {
	if f.Name == "" || strings.HasPrefix(f.Name, "/") || strings.Contains(f.Name, "..") {
		return fmt.Errorf("file %q: want a name relative to the image's root", f.Name)
	}
	in, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", f.Path, fi.Mode().Type())
	}
	mode := f.Mode
	if mode == 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(header(f.Name, tar.TypeReg, mode, fi.Size())); err != nil {
		return err
	}
	if _, err := io.Copy(tw, in); err != nil {
		return fmt.Errorf("read %s: %w", f.Path, err)
	}
	return nil
}

// header is a tar header that depends on name, type, mode and size alone.
func header(name string, typ byte, mode, size int64) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: epoch, Format: tar.FormatUSTAR}
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// marshal is json.Marshal of a value that always marshals: the OCI types.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
