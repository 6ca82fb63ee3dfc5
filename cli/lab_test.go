package cli

import (
	"strings"
	"testing"
)

// ghostwatch lab, with or without an incident and its flags, says where the
// lab went and exits 2, running nothing.
func TestLabIsItsOwnBinary(t *testing.T) {
	want := "ghostwatch: the lab is its own binary: go run ./lab/cmd/ghostwatch-lab <incident> (or install github.com/ghostwatch/ghostwatch/lab/cmd/ghostwatch-lab)\n"
	for _, args := range [][]string{
		{"lab"},
		{"lab", "conntrack-deploy"},
		{"lab", "conntrack-deploy", "--reuse-ip", "-o", "json"},
		{"lab", "cleanup", "--prefix", "p"},
		{"lab", "--help"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitError || out != "" || errOut != want {
			t.Errorf("ghostwatch %s: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", strings.Join(args, " "), code, out, errOut, ExitError, want)
		}
	}
	// The help lists the production commands, and names the lab's binary.
	_, out, _ := run(t, "", "--help")
	if !strings.Contains(out, "ghostwatch-lab ") {
		t.Errorf("ghostwatch --help does not name ghostwatch-lab:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "lab ") {
			t.Errorf("ghostwatch --help lists a lab command: %q", line)
		}
	}
}
