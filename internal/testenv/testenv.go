// Package testenv decides what a test does when the machine cannot run it:
// a kernel test that is not root, an end-to-end test without the
// Kubernetes binaries. On a developer's machine it skips and says why;
// under CI (CI=true) it fails, so that a suite which could not run its
// kernel and end-to-end tests never reports them as passed.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// CI reports whether the tests run in continuous integration: $CI is true
// (true, 1, t, as strconv.ParseBool reads it).
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Unavailable stops the test because something it needs is missing, which
// why names: it fails under CI and skips otherwise.
func Unavailable(tb testing.TB, why string) {
	tb.Helper()
	if CI() {
		tb.Fatal(why + " (CI=true: a test that cannot run fails instead of skipping)")
		return
	}
	tb.Skip(why)
}

// geteuid is os.Geteuid; the package's tests replace it.
var geteuid = os.Geteuid

// RequireRoot stops the test with Unavailable unless it runs as root.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	if geteuid() != 0 {
		Unavailable(tb, why)
	}
}

// CacheEnv names the directory the build scripts build into
// (scripts/kube-binaries.sh and the others), a directory per version set.
const CacheEnv = "GHOSTWATCH_KUBE_CACHE"

// DefaultCache is the cache's directory when CacheEnv is unset.
const DefaultCache = "/var/cache/ghostwatch"

// BinDir returns the directory $env names, where script built the
// executables names; unset, the directory script built into the cache
// (CacheEnv, else DefaultCache: the one named after script, kube- for
// scripts/kube-binaries.sh, holding every executable, built with this
// Go if there is one, else the last by name). None at all is notBuilt (a
// test then stops with Unavailable); a directory $env names lacking one of
// them is an error naming it.
func BinDir(env, script string, notBuilt error, names ...string) (string, error) {
	dir := os.Getenv(env)
	if dir == "" {
		if found := inCache(script, names); found != "" {
			return found, nil
		}
		return "", notBuilt
	}
	if err := HasExecutables(env+"="+dir, dir, script, names...); err != nil {
		return "", err
	}
	return dir, nil
}

// HasExecutables returns an error naming the first of names that is not an
// executable file in dir, and the script that builds it; what is how the
// message names the directory (the variable or the flag that gave it).
func HasExecutables(what, dir, script string, names ...string) error {
	for _, b := range names {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s has no executable %s: run %s", what, b, script)
		}
	}
	return nil
}

// inCache returns the directory of the cache script built names into, or
// "".
func inCache(script string, names []string) string {
	root := os.Getenv(CacheEnv)
	if root == "" {
		root = DefaultCache
	}
	prefix, _, _ := strings.Cut(filepath.Base(script), "-")
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	var found []string
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix+"-") && HasExecutables(dir, dir, script, names...) == nil {
			found = append(found, e.Name())
		}
	}
	if len(found) == 0 {
		return ""
	}
	slices.Sort(found)
	best := found[len(found)-1]
	for _, f := range found {
		if strings.HasSuffix(f, "-"+runtime.Version()) {
			best = f
		}
	}
	return filepath.Join(root, best)
}
