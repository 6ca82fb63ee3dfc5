package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/release"
)

// Media types of the OCI image spec (media-types.md) this package writes.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// LayoutVersion is the oci-layout file's imageLayoutVersion.
const LayoutVersion = "1.0.0"

// What the image runs. User is non-root by default: the controller runs as
// it; the agent's pod sets runAsUser 0, since it needs CAP_NET_ADMIN as root.
// The Dockerfile says the same (ENTRYPOINT, USER), so both images agree.
const (
	BinaryName = "ghostwatch"
	Entrypoint = "/" + BinaryName
	User       = "65532:65532"
)

// Annotation keys (annotations.md), and containerd's name of the image that
// docker load and ctr import tag the loaded image with.
const (
	AnnotationVersion  = "org.opencontainers.image.version"
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationLicenses = "org.opencontainers.image.licenses"
	AnnotationTitle    = "org.opencontainers.image.title"
	AnnotationRefName  = "org.opencontainers.image.ref.name"
	AnnotationImage    = "io.containerd.image.name"
)

// epoch is every file's modification time: the image depends on the
// binaries alone, not on when it was written.
var epoch = time.Unix(0, 0).UTC()

// Binary is one platform's ghostwatch binary.
type Binary struct {
	OS, Arch string
	// Path is the built binary's file.
	Path string
}

// Platform is the binary's os/arch.
func (b Binary) Platform() string { return b.OS + "/" + b.Arch }

var (
	platformPart = regexp.MustCompile(`^[a-z0-9]+$`)
	// tag is a Docker tag's grammar: the version must be one, since the
	// image is pushed as REPOSITORY:VERSION (build metadata, +…, is not).
	tag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// ParseBinary reads os/arch=PATH, as the ociimage command takes it.
func ParseBinary(arg string) (Binary, error) {
	platform, path, ok := strings.Cut(arg, "=")
	goos, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || path == "" || !platformPart.MatchString(goos) || !platformPart.MatchString(arch) {
		return Binary{}, fmt.Errorf("binary %q: want os/arch=PATH, e.g. linux/amd64=dist/linux_amd64/ghostwatch", arg)
	}
	return Binary{OS: goos, Arch: arch, Path: path}, nil
}

// Descriptor is an OCI content descriptor (descriptor.md).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Platform is a descriptor's platform (image-index.md).
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Index is an image index (image-index.md); index.json is one too.
type Index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []Descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Manifest is an image manifest (manifest.md).
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Config is an image configuration (config.md), the fields it writes.
type Config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Layout is the oci-layout file.
type Layout struct {
	ImageLayoutVersion string `json:"imageLayoutVersion"`
}

// Annotations are the image's annotations for version, on the index and on
// every manifest; the config repeats them as labels, which docker inspect
// shows.
func Annotations(version string) map[string]string {
	return map[string]string{
		AnnotationVersion:  version,
		AnnotationSource:   release.Source,
		AnnotationLicenses: release.License,
		AnnotationTitle:    BinaryName,
	}
}

// CheckVersion refuses a version the image cannot be tagged with: a release
// version (release.CheckVersion) that is also a Docker tag.
func CheckVersion(version string) error {
	if err := release.CheckVersion(version); err != nil {
		return err
	}
	if !tag.MatchString(version) {
		return fmt.Errorf("version %q: not a valid image tag (letters, digits, _ . -; no build metadata after +)", version)
	}
	return nil
}

// Write writes the image of version, one manifest per binary in the order
// given, to w as a tar of an OCI image layout, and returns the digest of its
// image index (what a registry shows for the pushed tag). index.json names
// it by version (org.opencontainers.image.ref.name, for
// skopeo copy oci-archive:FILE:VERSION) and by ImageRepository:version (for
// docker load). The same binaries give the same bytes.
func Write(w io.Writer, version string, bins []Binary) (string, error) {
	if err := CheckVersion(version); err != nil {
		return "", err
	}
	if len(bins) == 0 {
		return "", errors.New("no binary: give one per platform, e.g. linux/amd64=PATH")
	}
	annotations := Annotations(version)
	blobs := map[string][]byte{}
	put := func(mediaType string, b []byte) Descriptor {
		d := Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
		blobs[d.Digest] = b
		return d
	}
	index := Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Annotations: annotations}
	var seen []string
	for _, b := range bins {
		if slices.Contains(seen, b.Platform()) {
			return "", fmt.Errorf("binary %s %s: a second binary for %s", b.Platform(), b.Path, b.Platform())
		}
		seen = append(seen, b.Platform())
		layer, diffID, err := Layer(b.Path)
		if err != nil {
			return "", fmt.Errorf("binary %s %s: %w; build it with: CGO_ENABLED=0 GOOS=%s GOARCH=%s go build -trimpath -o %s ./cmd/ghostwatch",
				b.Platform(), b.Path, err, b.OS, b.Arch, b.Path)
		}
		var c Config
		c.Architecture, c.OS = b.Arch, b.OS
		c.Config.User, c.Config.Entrypoint, c.Config.Labels = User, []string{Entrypoint}, annotations
		c.RootFS.Type, c.RootFS.DiffIDs = "layers", []string{diffID}
		m := Manifest{
			SchemaVersion: 2,
			MediaType:     MediaTypeManifest,
			Config:        put(MediaTypeConfig, marshal(c)),
			Layers:        []Descriptor{put(MediaTypeLayer, layer)},
			Annotations:   annotations,
		}
		d := put(MediaTypeManifest, marshal(m))
		d.Platform = &Platform{Architecture: b.Arch, OS: b.OS}
		index.Manifests = append(index.Manifests, d)
	}
	top := put(MediaTypeIndex, marshal(index))
	top.Annotations = map[string]string{
		AnnotationRefName: version,
		AnnotationImage:   release.ImageRepository + ":" + version,
	}
	files := []file{
		{"oci-layout", marshal(Layout{ImageLayoutVersion: LayoutVersion})},
		{"index.json", marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{top}})},
	}
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		files = append(files, file{"blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), blobs[d]})
	}
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(dir, tar.TypeDir, 0o755, 0)); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(header(f.name, tar.TypeReg, 0o644, int64(len(f.body)))); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.body); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return top.Digest, nil
}

// WriteFile writes the image (Write) to path, whole or not at all.
func WriteFile(path, version string, bins []Binary) (string, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	d, err := Write(tmp, version, bins)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return d, os.Rename(tmp.Name(), path)
}

// Layer returns the gzip layer holding the binary at path as /ghostwatch
// (mode 0755, owner 0:0, modified 1970-01-01), and its diff ID: the digest
// of the uncompressed tar.
func Layer(path string) (layer []byte, diffID string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() == 0 {
		return nil, "", fmt.Errorf("%s is empty", path)
	}
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(uncompressed, gz))
	if err := tw.WriteHeader(header(BinaryName, tar.TypeReg, 0o755, fi.Size())); err != nil {
		return nil, "", err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", path, err)
	}
	// Close fails if the file was shorter than it said (changed while read).
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", path, err)
	}
	if err := gz.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), sum(uncompressed), nil
}

// file is one file of the layout's tar.
type file struct {
	name string
	body []byte
}

// header is a tar header that depends on name, type, mode and size alone.
func header(name string, typ byte, mode, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     mode,
		Size:     size,
		ModTime:  epoch,
		Format:   tar.FormatUSTAR,
	}
}

func digest(b []byte) string {
	h := sha256.New()
	h.Write(b)
	return sum(h)
}

func sum(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// marshal is json.Marshal of a value that always marshals: the types above.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
