package release

import (
	"strings"
	"testing"
)

func TestManifestFollowsKrewsRules(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	b, err := Manifest("v0.1.0", []Archive{
		{OS: "linux", Arch: "amd64", URI: "https://github.com/ghostwatch/ghostwatch/releases/download/v0.1.0/ghostwatch_v0.1.0_linux_amd64.tar.gz", SHA256: sum},
		{OS: "linux", Arch: "arm64", URI: "https://github.com/ghostwatch/ghostwatch/releases/download/v0.1.0/ghostwatch_v0.1.0_linux_arm64.tar.gz", SHA256: sum},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b)
	if err != nil {
		t.Fatalf("the manifest written does not parse back: %v\n%s", err, b)
	}
	if p.Metadata.Name != "ghostwatch" || len(p.Spec.Platforms) != 2 || p.Spec.Platforms[1].Selector.MatchLabels["arch"] != "arm64" {
		t.Errorf("manifest %+v", p)
	}
	for _, tc := range []struct {
		name    string
		version string
		a       Archive
		want    string
	}{
		{"no v prefix", "0.1.0", Archive{OS: "linux", Arch: "amd64", URI: "https://x/a.tar.gz", SHA256: sum}, "a semantic version with a v prefix"},
		{"plain http", "v0.1.0", Archive{OS: "linux", Arch: "amd64", URI: "http://x/a.tar.gz", SHA256: sum}, "want an https address"},
		{"a short digest", "v0.1.0", Archive{OS: "linux", Arch: "amd64", URI: "https://x/a.tar.gz", SHA256: "abc"}, "64 lowercase hex digits"},
	} {
		if _, err := Manifest(tc.version, []Archive{tc.a}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Manifest("v0.1.0", nil); err == nil || !strings.Contains(err.Error(), "no platform") {
		t.Errorf("no archive: %v", err)
	}
	a := Archive{OS: "linux", Arch: "amd64", URI: "https://x/a.tar.gz", SHA256: sum}
	if _, err := Manifest("v0.1.0", []Archive{a, a}); err == nil || !strings.Contains(err.Error(), "repeats another platform's") {
		t.Errorf("two platforms alike: %v", err)
	}
	if _, err := Parse([]byte("apiVersion: krew.googlecontainertools.github.com/v1alpha2\nkind: Plugin\nmetadata: {name: kubectl-ghostwatch}\nspec: {version: v1.0.0}\n")); err == nil || !strings.Contains(err.Error(), "without kubectl-") {
		t.Errorf("a kubectl- name: %v", err)
	}
}
