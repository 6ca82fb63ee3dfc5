package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/ghostwatch/ghostwatch/internal/release/oci"
	"github.com/ghostwatch/ghostwatch/lab/image"
)

// Images the lab writes for the node: the sandbox's, and the workloads'
// (labpod's roles: labpod serve, ...).
const (
	LabpodImage = "lab.ghostwatch.io/labpod:1"
	labpodPkg   = "github.com/ghostwatch/ghostwatch/lab/cmd/labpod"
)

// BuildImages builds labpod (static, from this module's source: a
// checkout) into dir and writes SandboxImage and LabpodImage around it to
// dir/lab-images.oci.tar, which it returns.
func BuildImages(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "labpod")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, labpodPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building labpod: %w: %s", err, out)
	}
	files := []image.File{{Name: "labpod", Path: bin}}
	archive := filepath.Join(dir, "lab-images.oci.tar")
	err := image.WriteFile(archive,
		image.Image{Ref: SandboxImage, Entrypoint: []string{"/labpod", "pause"}, Files: files},
		image.Image{Ref: LabpodImage, Entrypoint: []string{"/labpod"}, Files: files})
	return archive, err
}

// LabVersion is the version the lab's build of ghostwatch is tagged with:
// its image is release.ImageRepository:LabVersion.
const LabVersion = "v0.0.0-lab"

// BuildReleaseImage builds ghostwatch (static, from this module's source:
// a checkout) into dir and writes its release image, as scripts/dist.sh
// does, tagged LabVersion, to dir/ghostwatch-image.oci.tar, which it
// returns.
func BuildReleaseImage(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "ghostwatch")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/ghostwatch/ghostwatch/cmd/ghostwatch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ghostwatch: %w: %s", err, out)
	}
	archive := filepath.Join(dir, "ghostwatch-image.oci.tar")
	_, err := oci.WriteFile(archive, LabVersion, []oci.Binary{{OS: "linux", Arch: runtime.GOARCH, Path: bin}})
	return archive, err
}
