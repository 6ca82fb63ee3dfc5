package labcmd

import (
	"bytes"
	"context"
	"os"
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
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	code := cmdline.Execute(context.Background(), NewRootCommand(streams), args, streams)
	return code, out.String(), errOut.String()
}
