package release

import "fmt"

// Source is the project's repository: the krew manifest's homepage and the
// image's org.opencontainers.image.source.
const Source = "https://github.com/ghostwatch/ghostwatch"

// License is the SPDX expression of the project's license, as the image's
// org.opencontainers.image.licenses says it.
const License = "Apache-2.0"

// ImageRepository is where a release's image is pushed; deploy/ names it.
const ImageRepository = "ghcr.io/ghostwatch/ghostwatch"

// CheckVersion refuses a release version that is not a v-prefixed semantic
// version (v0.1.0, v1.2.3-rc.1): krew wants one, and the image is tagged
// with it.
func CheckVersion(v string) error {
	if !semver.MatchString(v) {
		return fmt.Errorf("version %q: a semantic version with a v prefix (v0.1.0)", v)
	}
	return nil
}
