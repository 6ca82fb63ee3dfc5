package build

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
)

// DefaultHeartbeat is how long a build may print nothing before Build says
// it is still running: go build is silent while it compiles, for minutes.
const DefaultHeartbeat = time.Minute

// Options are how Build builds.
type Options struct {
	// Cache is the directory under which the script makes a directory per
	// version set; "" means CacheRoot().
	Cache string
	// Progress gets a line for each line the script prints on stderr (its
	// steps, and the go command's downloads), prefixed with the set's name
	// and the time since the start, and a line when it has been silent for
	// Heartbeat (0 means DefaultHeartbeat).
	Progress  io.Writer
	Heartbeat time.Duration

	// recipe replaces recipeFS, for the tests' stub scripts.
	recipe fs.FS
}

// CacheRoot is the cache's directory: $GHOSTWATCH_KUBE_CACHE, else
// /var/cache/ghostwatch, where the scripts build and testenv.BinDir looks.
func CacheRoot() string {
	if d := os.Getenv(testenv.CacheEnv); d != "" {
		return d
	}
	return testenv.DefaultCache
}

// Check returns an error saying why the set cannot be built here into
// cache ("" means CacheRoot()): no go command or no bash on PATH, or a
// cache that cannot be written.
func Check(s Set, cache string) error {
	if cache == "" {
		cache = CacheRoot()
	}
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("building %s needs the go command, and there is none on PATH: install Go (https://go.dev/dl/) or add its bin directory to PATH", s.What)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return fmt.Errorf("building %s needs bash, which runs its recipe (%s), and there is none on PATH", s.What, s.Script)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return notWritable(cache, err)
	}
	probe, err := os.MkdirTemp(cache, ".probe-")
	if err != nil {
		return notWritable(cache, err)
	}
	return os.Remove(probe)
}

func notWritable(cache string, err error) error {
	return fmt.Errorf("the build cache %s is not writable (%w): set %s to a directory you can write, or build as root", cache, err, testenv.CacheEnv)
}

// Build builds the set into the cache, unless the cache holds it already,
// and returns the directory holding its binaries. It lays the recipe out
// in a temporary directory as the repository does and runs the script
// there with bash: one recipe for a checkout and for the binary. A
// canceled ctx stops the script and the go command it runs.
func Build(ctx context.Context, s Set, o Options) (string, error) {
	if o.Cache == "" {
		o.Cache = CacheRoot()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.recipe == nil {
		o.recipe = recipeFS
	}
	if err := Check(s, o.Cache); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "ghostwatch-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	script, err := layOut(o.recipe, s, tmp)
	if err != nil {
		return "", err
	}

	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), testenv.CacheEnv+"="+o.Cache, "GOWORK=off")
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	// Its own process group, so that a cancel stops go build too, not
	// bash alone; the script's EXIT trap removes its half-built files.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("building %s: %w", s.What, err)
	}
	last := relay(s, stderr, o.Progress, start, o.Heartbeat)
	err = cmd.Wait()
	if ctx.Err() != nil {
		return "", fmt.Errorf("building %s: %w", s.What, context.Cause(ctx))
	}
	if err != nil {
		if last != "" {
			return "", fmt.Errorf("building %s: %s: %w (its last line: %s)", s.What, s.Script, err, last)
		}
		return "", fmt.Errorf("building %s: %s: %w", s.What, s.Script, err)
	}
	dir := lastLine(stdout.String())
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("building %s: %s printed no directory, but %q", s.What, s.Script, stdout.String())
	}
	if err := testenv.HasExecutables(dir, dir, s.Command(), s.Binaries...); err != nil {
		return "", fmt.Errorf("building %s: %w", s.What, err)
	}
	fmt.Fprintf(o.Progress, "[%s %s] %s %s in %s\n", s.Name, elapsed(time.Since(start)), strings.Join(s.Binaries, ", "), s.verb(), dir)
	return dir, nil
}

// relay copies the script's stderr to progress a line at a time, each
// prefixed with the set's name and the time since start, and says the
// build is still running when it has been silent for heartbeat. It returns
// at the end of r, with the last line read.
func relay(s Set, r io.Reader, progress io.Writer, start time.Time, heartbeat time.Duration) string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
		// What the scanner could not read (a line over 1 MB) is dropped:
		// the pipe must be drained so that the script never blocks on it.
		_, _ = io.Copy(io.Discard, r)
	}()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	var last string
	quiet := time.Now()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return last
			}
			last, quiet = l, time.Now()
			fmt.Fprintf(progress, "[%s %s] %s\n", s.Name, elapsed(time.Since(start)), l)
		case now := <-tick.C:
			if now.Sub(quiet) >= heartbeat {
				fmt.Fprintf(progress, "[%s %s] still building (go build says nothing until a binary is done)\n", s.Name, elapsed(time.Since(start)))
				quiet = now
			}
		}
	}
}

// elapsed is d to the second: 1m5s, 12s.
func elapsed(d time.Duration) string {
	return d.Truncate(time.Second).String()
}

// lastLine is the last line of s that is not blank.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
