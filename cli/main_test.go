package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run this package's test binary as the ghostwatch
// command (GHOSTWATCH_RUN_MAIN=1), for tests that need a separate process:
// another user, another network namespace.
func TestMain(m *testing.M) {
	if os.Getenv("GHOSTWATCH_RUN_MAIN") == "1" {
		os.Args = append([]string{"ghostwatch"}, os.Args[1:]...)
		code := Main()
		if os.Getenv(peakEnv) == "1" {
			printPeak()
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// peakEnv asks the command run as GHOSTWATCH_RUN_MAIN to print, last on
// stderr, the peak of its memory (the kernel's VmHWM): a child's rusage
// would count its parent's before exec.
const peakEnv = "GHOSTWATCH_PEAK_RSS"

func printPeak() {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fmt.Fprintln(os.Stderr, line)
		}
	}
}

// peakRSS reads the line printPeak wrote, in bytes.
func peakRSS(t *testing.T, stderr string) int64 {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in %s", stderr)
	return 0
}

// selfBinary copies the test binary where any user may run it.
func selfBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Every directory on the way must be open to the other user.
	dir, err := os.MkdirTemp("", "ghostwatch-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "ghostwatch")
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
