// Package release writes and checks what a ghostwatch release publishes
// besides its archives: the krew plugin manifest that installs the
// binary as kubectl-ghostwatch (kubectl krew install --manifest=…), and
// the facts the release's image repeats (version rule, source, license).
// It builds nothing and reads no file: scripts/dist.sh does.
package release

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Archive is one release archive: a platform's binary in a tar.gz.
type Archive struct {
	OS, Arch string
	// URI is where the archive is downloaded from; SHA256 its digest.
	URI, SHA256 string
}

// Plugin is a krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type Plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec PluginSpec `json:"spec"`
}

// PluginSpec is a Plugin's spec.
type PluginSpec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Platforms        []Platform `json:"platforms"`
}

// Platform is one platform's archive and binary.
type Platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	Files  []File `json:"files"`
	Bin    string `json:"bin"`
}

// File is a file krew copies out of the archive.
type File struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Manifest returns the krew manifest of version for archives, checked.
func Manifest(version string, archives []Archive) ([]byte, error) {
	p := Plugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	p.Metadata.Name = "ghostwatch"
	p.Spec = PluginSpec{
		Version:          version,
		Homepage:         Source,
		ShortDescription: "Find and clear Kubernetes networking ghosts",
		Description: "Finds the state that outlives a pod when its IP is recycled: conntrack flows " +
			"still translated to dead pods, pod IPs handed to two pods by IPAM, gossip members " +
			"shunning the pod that inherited a dead one's address. The scan reads the cluster and " +
			"this node, or saved evidence, and explains each ghost with the exact command that clears it.",
	}
	for _, a := range archives {
		var pl Platform
		pl.Selector.MatchLabels = map[string]string{"os": a.OS, "arch": a.Arch}
		pl.URI, pl.SHA256, pl.Bin = a.URI, a.SHA256, "ghostwatch"
		pl.Files = []File{{From: "ghostwatch", To: "."}, {From: "LICENSE", To: "."}}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	if err := Check(&p); err != nil {
		return nil, err
	}
	return yaml.Marshal(&p)
}

var (
	pluginName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	semver     = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	sha256Hex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Check holds a manifest to krew's rules (krew's validation of
// index/validation): its kind and apiVersion, a lowercase name without the
// kubectl- prefix, a v-prefixed semantic version, a short description, and
// platforms each with a selector, an https archive, its sha256, the files
// to copy, and a bin among them; no two platforms alike.
func Check(p *Plugin) error {
	var errs []error
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		errs = append(errs, fmt.Errorf("apiVersion/kind %s/%s: want krew.googlecontainertools.github.com/v1alpha2 Plugin", p.APIVersion, p.Kind))
	}
	if !pluginName.MatchString(p.Metadata.Name) || strings.HasPrefix(p.Metadata.Name, "kubectl-") {
		errs = append(errs, fmt.Errorf("name %q: lowercase letters, digits and dashes, without kubectl-", p.Metadata.Name))
	}
	if err := CheckVersion(p.Spec.Version); err != nil {
		errs = append(errs, err)
	}
	if p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 50 {
		errs = append(errs, fmt.Errorf("shortDescription %q: want 1 to 50 characters", p.Spec.ShortDescription))
	}
	if len(p.Spec.Platforms) == 0 {
		errs = append(errs, errors.New("no platform"))
	}
	var seen []string
	for i, pl := range p.Spec.Platforms {
		at := fmt.Sprintf("platforms[%d]", i)
		sel := fmt.Sprint(pl.Selector.MatchLabels)
		switch {
		case len(pl.Selector.MatchLabels) == 0:
			errs = append(errs, fmt.Errorf("%s: no selector", at))
		case slices.Contains(seen, sel):
			errs = append(errs, fmt.Errorf("%s: selector %s repeats another platform's", at, sel))
		}
		seen = append(seen, sel)
		if u, err := url.Parse(pl.URI); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: uri %q: want an https address", at, pl.URI))
		}
		if !sha256Hex.MatchString(pl.SHA256) {
			errs = append(errs, fmt.Errorf("%s: sha256 %q: want 64 lowercase hex digits", at, pl.SHA256))
		}
		if pl.Bin == "" || strings.Contains(pl.Bin, "..") {
			errs = append(errs, fmt.Errorf("%s: bin %q", at, pl.Bin))
		}
		if !slices.ContainsFunc(pl.Files, func(f File) bool { return f.From == pl.Bin }) {
			errs = append(errs, fmt.Errorf("%s: bin %s is not among the files copied", at, pl.Bin))
		}
	}
	return errors.Join(errs...)
}

// Parse reads a manifest, refusing unknown fields, and checks it.
func Parse(b []byte) (*Plugin, error) {
	var p Plugin
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(b), &p); err != nil {
		return nil, err
	}
	return &p, Check(&p)
}
