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
	"strconv"
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

// BinDir returns the directory $env names, where script built the
// executables names: unset is notBuilt (a test then stops with
// Unavailable), a directory lacking one of them an error naming it.
func BinDir(env, script string, notBuilt error, names ...string) (string, error) {
	dir := os.Getenv(env)
	if dir == "" {
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
