package labcmd

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
)

// TestMain lets a test run this package's test binary as the ghostwatch-lab
// command (GHOSTWATCH_RUN_MAIN=1), for tests that need a separate process:
// one whose stdout closes, or that gets a signal.
func TestMain(m *testing.M) {
	if os.Getenv("GHOSTWATCH_RUN_MAIN") == "1" {
		os.Args = append([]string{"ghostwatch-lab"}, os.Args[1:]...)
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// run runs ghostwatch-lab with args and stdin, returning its exit code,
// stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runWith(t, realBuilder, stdin, args...)
}

// runWith is run with b building what a lab lacks.
func runWith(t *testing.T, b builder, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	code := cmdline.Execute(context.Background(), newRootCommand(streams, b), args, streams)
	return code, out.String(), errOut.String()
}

// ghostwatch-lab's root holds what `ghostwatch lab` held, every incident
// and the cleanup, and says its version as ghostwatch does.
func TestRootCommands(t *testing.T) {
	code, out, errOut := run(t, "", "--help")
	if code != cmdline.ExitOK || !strings.HasPrefix(out, "ghostwatch-lab rebuilds an incident") {
		t.Fatalf("--help: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, c := range []string{"conntrack-deploy", "conntrack-pool", "hostlocal-wipe", "calico-misbook", "gossip-reuse", "build", "cleanup", "version"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("--help does not list %s:\n%s", c, out)
		}
	}
	code, out, errOut = run(t, "", "version")
	if code != cmdline.ExitOK || !strings.HasPrefix(out, "ghostwatch-lab ") || !strings.Contains(out, "(commit ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
