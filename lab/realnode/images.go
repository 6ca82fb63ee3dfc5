package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

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
