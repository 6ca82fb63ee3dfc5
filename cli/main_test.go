package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestMain lets a test run this package's test binary as the ghostwatch
// command (GHOSTWATCH_RUN_MAIN=1), for tests that need a separate process:
// another user, another network namespace.
func TestMain(m *testing.M) {
	if os.Getenv("GHOSTWATCH_RUN_MAIN") == "1" {
		os.Args = append([]string{"ghostwatch"}, os.Args[1:]...)
		os.Exit(Main())
	}
	os.Exit(m.Run())
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
