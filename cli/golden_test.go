package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestScanGolden")

// TestScanGolden scans each case under testdata/scan offline, as a user
// would: objects.yaml (kubectl get … -A -o yaml), conntrack.txt (conntrack
// -L; absent for a case of the cluster rules only), the extra arguments in args (one per line), and compares the exit
// code, stdout and stderr with want.txt. Each case's README says what it
// shows. go test ./cli -run TestScanGolden -update rewrites want.txt.
func TestScanGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/scan/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no cases under testdata/scan")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := []string{"scan", "--kube-objects", filepath.Join(dir, "objects.yaml")}
			// A case of the cluster rules alone has no table.
			if _, err := os.Stat(filepath.Join(dir, "conntrack.txt")); err == nil {
				args = append(args, "--conntrack-file", filepath.Join(dir, "conntrack.txt"))
			}
			if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
				for _, a := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if a = strings.TrimSpace(a); a != "" {
						args = append(args, a)
					}
				}
			} else if !os.IsNotExist(err) {
				t.Fatal(err)
			}
			code, out, errOut := run(t, "", args...)
			got := fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", code, out, errOut)
			want := filepath.Join(dir, "want.txt")
			if *update {
				if err := os.WriteFile(want, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(b) {
				t.Errorf("ghostwatch %s\ngot:\n%s\nwant:\n%s", strings.Join(args, " "), got, b)
			}
		})
	}
}

// The README shows one golden case's output as the sample a new user
// reads: it must be what the scan prints today.
func TestReadmeSampleIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/scan/deleted-service/want.txt")
	if err != nil {
		t.Fatal(err)
	}
	out, _, _ := strings.Cut(strings.SplitN(string(want), "--- stdout\n", 2)[1], "--- stderr")
	if !strings.Contains(string(readme), strings.TrimRight(out, "\n")+"\n```") {
		t.Errorf("README.md's sample scan is not testdata/scan/deleted-service's output; copy it from want.txt:\n%s", out)
	}
}
