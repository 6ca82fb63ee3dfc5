package build

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/poll"
)

// stubSet is a set whose recipe is stub's script: it runs from
// tools/stub, as the real scripts do, and builds a and b.
var stubSet = Set{Name: "stub", What: "the stub binaries", Binaries: []string{"a", "b"},
	Env: "STUB_BIN", Flag: "--stub-bin", Script: "scripts/stub.sh", Tools: "tools/stub", Takes: time.Second}

// stub is a recipe whose script is body, run after cd to tools/stub (which
// fails unless the recipe was laid out as the repository is).
func stub(body string) fstest.MapFS {
	return fstest.MapFS{
		"recipe/scripts/stub.sh.txt":     {Data: []byte("set -euo pipefail\ncd \"$(dirname \"$0\")/../tools/stub\"\ntest -f go.mod\n" + body)},
		"recipe/tools/stub/go.mod.txt":   {Data: []byte("module stub\n")},
		"recipe/tools/stub/tools.go.txt": {Data: []byte("package stub\n")},
	}
}

// builds is the body of a stub that builds into the cache as the scripts
// do, saying each step on stderr and the directory on stdout.
const builds = `dir="$GHOSTWATCH_KUBE_CACHE/stub-v1-$(cat go.mod | wc -l)"
mkdir -p "$dir"
for b in a b; do
  echo "stub: building $b ..." >&2
  printf '#!/bin/sh\n' > "$dir/$b"; chmod +x "$dir/$b"
  echo "stub: $b built in 0s" >&2
done
echo "$dir"
`

// Build runs the set's script in a lay-out of the repository, with the
// cache it was given, streams each line the script says on stderr with
// the set's name and the time since the start, and returns the directory
// the script printed.
func TestBuildStreamsAndReturnsTheDirectory(t *testing.T) {
	cache := t.TempDir()
	var progress bytes.Buffer
	dir, err := Build(context.Background(), stubSet, Options{Cache: cache, Progress: &progress, recipe: stub(builds)})
	if err != nil {
		t.Fatalf("Build: %v; progress:\n%s", err, progress.String())
	}
	if want := filepath.Join(cache, "stub-v1-1"); dir != want {
		t.Errorf("Build returned %q, want %q", dir, want)
	}
	lines := strings.Split(strings.TrimSuffix(progress.String(), "\n"), "\n")
	want := []string{"stub: building a ...", "stub: a built in 0s", "stub: building b ...", "stub: b built in 0s", "a, b are in " + dir}
	if len(lines) != len(want) {
		t.Fatalf("progress:\n%s\nwant the lines %q", progress.String(), want)
	}
	prefix := regexp.MustCompile(`^\[stub \d+(\.\d+)?m?s\] `)
	for i, l := range lines {
		if !prefix.MatchString(l) || prefix.ReplaceAllString(l, "") != want[i] {
			t.Errorf("progress line %d is %q, want [stub <elapsed>] %s", i, l, want[i])
		}
	}
}

// A script that fails is an error naming the set, the script and its
// last line; one that prints no directory, or one lacking a binary, is an
// error too.
func TestBuildFails(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *regexp.Regexp
	}{
		{"exit", "echo 'stub: building a ...' >&2\necho 'go: k8s.io/x: no such module' >&2\nexit 1\n",
			regexp.MustCompile(`^building the stub binaries: scripts/stub\.sh: exit status 1 \(its last line: go: k8s\.io/x: no such module\)$`)},
		{"no directory", "true\n",
			regexp.MustCompile(`^building the stub binaries: scripts/stub\.sh printed no directory, but ""$`)},
		{"lacks b", "d=\"$GHOSTWATCH_KUBE_CACHE/x\"; mkdir -p \"$d\"; printf '' > \"$d/a\"; chmod +x \"$d/a\"; echo \"$d\"\n",
			regexp.MustCompile(`^building the stub binaries: /.*/x has no executable b: run ghostwatch-lab build stub$`)},
	} {
		_, err := Build(context.Background(), stubSet, Options{Cache: t.TempDir(), recipe: stub(tc.body)})
		if err == nil || !tc.want.MatchString(err.Error()) {
			t.Errorf("%s: Build returned %v, want %s", tc.name, err, tc.want)
		}
	}
}

// A script silent for longer than Heartbeat gets a line saying the build
// still runs.
func TestBuildHeartbeat(t *testing.T) {
	var progress bytes.Buffer
	_, err := Build(context.Background(), stubSet, Options{Cache: t.TempDir(), Progress: &progress, Heartbeat: 20 * time.Millisecond,
		recipe: stub("sleep 0.5\n" + builds)})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\[stub \d+(\.\d+)?m?s\] still building \(go build says nothing until a binary is done\)$`).MatchString(progress.String()) {
		t.Errorf("no heartbeat in half a second of silence with Heartbeat 20ms:\n%s", progress.String())
	}
}

// syncWriter is a progress writer that calls first once, on its first
// line.
type syncWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	first func()
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(w.first)
	return w.buf.Write(p)
}

// Canceling stops the script and what it runs (go build, here a sleep in
// the background), and Build returns the cause.
func TestBuildCanceled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := errors.New("interrupted")
	w := &syncWriter{first: func() { cancel(stop) }}
	_, err := Build(ctx, stubSet, Options{Cache: t.TempDir(), Progress: w,
		recipe: stub("sleep 60 & echo $! > " + pidFile + "\necho 'stub: building a ...' >&2\nwait\n")})
	if !errors.Is(err, stop) || err.Error() != "building the stub binaries: interrupted" {
		t.Fatalf("Build returned %v, want the cause", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the script's child to end", func() bool {
		// Gone, or a zombie about to be reaped: /proc says which.
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) || (err == nil && strings.Contains(string(stat), ") Z "))
	})
}

// Check names what is missing: the go command, bash, a cache it can
// write (with the variable that moves it).
func TestCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Check(stubSet, filepath.Join(file, "cache"))
	want := "the build cache " + file + "/cache is not writable (mkdir " + file + ": not a directory): set GHOSTWATCH_KUBE_CACHE to a directory you can write, or build as root"
	if err == nil || err.Error() != want {
		t.Errorf("Check with a file for a cache: %v, want %q", err, want)
	}
	if err := Check(stubSet, t.TempDir()); err != nil {
		t.Errorf("Check: %v", err)
	}

	t.Setenv("PATH", t.TempDir())
	err = Check(stubSet, t.TempDir())
	if want := "building the stub binaries needs the go command, and there is none on PATH: install Go (https://go.dev/dl/) or add its bin directory to PATH"; err == nil || err.Error() != want {
		t.Errorf("Check without go: %v, want %q", err, want)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	err = Check(stubSet, t.TempDir())
	if want := "building the stub binaries needs bash, which runs its recipe (scripts/stub.sh), and there is none on PATH"; err == nil || err.Error() != want {
		t.Errorf("Check without bash: %v, want %q", err, want)
	}
}

// Lookup knows every set and all, and names them for anything else.
func TestLookup(t *testing.T) {
	if got, err := Lookup("all"); err != nil || len(got) != len(Sets) {
		t.Errorf("Lookup(all) = %d sets, %v", len(got), err)
	}
	for _, s := range Sets {
		if got, err := Lookup(s.Name); err != nil || len(got) != 1 || got[0].Name != s.Name {
			t.Errorf("Lookup(%s) = %v, %v", s.Name, got, err)
		}
	}
	if _, err := Lookup("k8s"); err == nil || err.Error() != `nothing called "k8s" to build: want kube, calico, cni, crictl, prometheus, consul, all` {
		t.Errorf("Lookup(k8s): %v", err)
	}
}

// NotBuilt names the command that builds the set, how long it takes, the
// flag that builds it first, the script, and the flag and the variable
// that name a directory; its verbs agree with the set.
func TestNotBuilt(t *testing.T) {
	for name, want := range map[string]string{
		"kube": "the Kubernetes binaries are not built: build them with `ghostwatch-lab build kube` (about 10 minutes, once), or pass --build to build them first (in a checkout, scripts/kube-binaries.sh builds the same); or name a directory holding them with --kube-bin or $GHOSTWATCH_KUBE_BIN",
		"cni":  "the CNI host-local plugin is not built: build it with `ghostwatch-lab build cni` (about 15 seconds, once), or pass --build to build it first (in a checkout, scripts/cni-plugins.sh builds the same); or name a directory holding it with --cni-bin or $GHOSTWATCH_CNI_BIN",
	} {
		err := MustLookup(name).NotBuilt()
		if err.Error() != want || !errors.Is(err, ErrNotBuilt) {
			t.Errorf("%s: %v, want %q wrapping ErrNotBuilt", name, err, want)
		}
	}
}
