// Package buildinfo says which ghostwatch this binary is: its version,
// commit and Go version, from what the linker and the Go toolchain
// recorded, and the repository reference its documentation is read at.
package buildinfo

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// version is set with -ldflags "-X github.com/ghostwatch/ghostwatch/internal/buildinfo.version=v0.1.0".
var version = "dev"

// Repository is where the project's sources and docs live.
const Repository = "https://github.com/ghostwatch/ghostwatch"

// Info is what the build recorded.
type Info struct {
	// Version is the version set at link time, else the module's version
	// (go install …@vX), else "dev".
	Version string
	// Commit is the full VCS revision, "" when not recorded.
	Commit string
	// Modified is true when the work tree had changes at build time.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the build's Info.
func Read() Info {
	i := Info{Version: version, GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if i.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	i.GoVersion = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Ref is the repository reference whose docs match this binary: its
// release tag, else its commit when the tree was clean, else main.
func (i Info) Ref() string {
	switch {
	case strings.HasPrefix(i.Version, "v") && !pseudo.MatchString(i.Version):
		// A tag, not a pseudo-version (v0.0.0-20261123101500-0123456789ab).
		return i.Version
	case i.Commit != "" && !i.Modified:
		return i.Commit
	}
	return "main"
}

// pseudo matches the end of a Go pseudo-version: a UTC time and a
// 12-digit commit prefix.
var pseudo = regexp.MustCompile(`[-.]\d{14}-[0-9a-f]{12}(\+incompatible)?$`)

// DocURL is the address of path (a file of the repository, such as
// docs/runbooks/stale-nat-flow.md) at this binary's reference: a page that
// works on a node without the repository, and says what this version does.
func DocURL(path string) string {
	return Repository + "/blob/" + Read().Ref() + "/" + strings.TrimPrefix(path, "/")
}
