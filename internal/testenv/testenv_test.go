package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records whether the code under test skipped or failed, without
// stopping the test that runs it.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, fmt.Sprint(args...)
}

func (f *fakeTB) Fatal(args ...any) {
	f.failed, f.msg = true, fmt.Sprint(args...)
}

func (f *fakeTB) Skipf(format string, args ...any)  { f.Skip(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }
func (f *fakeTB) SkipNow()                          { f.Skip() }
func (f *fakeTB) FailNow()                          { f.Fatal() }

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		fail bool
	}{
		{"", false},
		{"false", false},
		{"0", false},
		{"not a boolean", false},
		{"true", true},
		{"1", true},
		{"TRUE", true},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			if got := CI(); got != tc.fail {
				t.Errorf("CI() = %v, want %v", got, tc.fail)
			}
			f := &fakeTB{}
			Unavailable(f, "needs a thing")
			if f.failed != tc.fail || f.skipped == tc.fail {
				t.Errorf("skipped %v, failed %v; want failed %v and skipped %v", f.skipped, f.failed, tc.fail, !tc.fail)
			}
			if !strings.Contains(f.msg, "needs a thing") {
				t.Errorf("message %q does not say why", f.msg)
			}
		})
	}
}

func TestRequireRoot(t *testing.T) {
	defer func(g func() int) { geteuid = g }(geteuid)
	for _, tc := range []struct {
		uid        int
		ci         string
		skip, fail bool
	}{
		{0, "", false, false},
		{0, "true", false, false},
		{1000, "", true, false},
		{1000, "true", false, true},
	} {
		t.Run(fmt.Sprintf("uid=%d,CI=%s", tc.uid, tc.ci), func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			geteuid = func() int { return tc.uid }
			f := &fakeTB{}
			RequireRoot(f, "needs root")
			if f.skipped != tc.skip || f.failed != tc.fail {
				t.Errorf("skipped %v, failed %v; want skipped %v, failed %v", f.skipped, f.failed, tc.skip, tc.fail)
			}
		})
	}
}

func TestBinDir(t *testing.T) {
	dir := t.TempDir()
	notBuilt := errors.New("not built")
	t.Setenv(CacheEnv, t.TempDir())
	t.Setenv("GW_TEST_BIN", "")
	if _, err := BinDir("GW_TEST_BIN", "scripts/x.sh", notBuilt, "tool"); err != notBuilt {
		t.Errorf("unset: %v, want the not-built error", err)
	}
	t.Setenv("GW_TEST_BIN", dir)
	if _, err := BinDir("GW_TEST_BIN", "scripts/x.sh", notBuilt, "tool"); err == nil || err.Error() != "GW_TEST_BIN="+dir+" has no executable tool: run scripts/x.sh" {
		t.Errorf("missing tool: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tool"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BinDir("GW_TEST_BIN", "scripts/x.sh", notBuilt, "tool"); err == nil {
		t.Error("a file that is not executable passed")
	}
	if err := os.Chmod(filepath.Join(dir, "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := BinDir("GW_TEST_BIN", "scripts/x.sh", notBuilt, "tool"); err != nil || got != dir {
		t.Errorf("built: %q, %v", got, err)
	}
	if err := HasExecutables("--tool-bin "+dir, dir, "scripts/x.sh", "tool", "other"); err == nil || err.Error() != "--tool-bin "+dir+" has no executable other: run scripts/x.sh" {
		t.Errorf("a flag's directory lacking a tool: %v", err)
	}
}

// Unset, the variable gives way to the cache the script builds into: the
// directory named after the script that holds every executable, the one
// built with this Go first.
func TestBinDirFindsTheCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	t.Setenv("GW_TEST_BIN", "")
	notBuilt := errors.New("not built")
	mk := func(name string, tools ...string) {
		d := filepath.Join(cache, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools {
			if err := os.WriteFile(filepath.Join(d, tool), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("x-v1-go0.0.1", "tool")
	mk("x-v2-go0.0.2") // incomplete
	mk("y-v9-"+runtime.Version(), "tool")
	if got, err := BinDir("GW_TEST_BIN", "scripts/x-tools.sh", notBuilt, "tool"); err != nil || got != filepath.Join(cache, "x-v1-go0.0.1") {
		t.Errorf("got %q, %v", got, err)
	}
	mk("x-v0-"+runtime.Version(), "tool")
	if got, err := BinDir("GW_TEST_BIN", "scripts/x-tools.sh", notBuilt, "tool"); err != nil || got != filepath.Join(cache, "x-v0-"+runtime.Version()) {
		t.Errorf("with this Go's: got %q, %v", got, err)
	}
	if _, err := BinDir("GW_TEST_BIN", "scripts/z-tools.sh", notBuilt, "tool"); err != notBuilt {
		t.Errorf("nothing built: %v", err)
	}
}
