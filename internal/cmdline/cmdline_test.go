package cmdline

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// An error quoting what a server or a file said is printed on its one
// line, a newline and a terminal's escape sequence in it shown escaped.
func TestExecutePrintsTheErrorOnOneLine(t *testing.T) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}
	cmd := &cobra.Command{Use: "x", SilenceErrors: true, SilenceUsage: true, RunE: func(*cobra.Command, []string) error {
		return errors.New("consul agent answered 403: x\x1b[31m\ncritical  forged")
	}}
	if code := Execute(context.Background(), cmd, nil, streams); code != ExitError {
		t.Errorf("exit %d, want %d", code, ExitError)
	}
	if got, want := errOut.String(), "ghostwatch: consul agent answered 403: x\\x1b[31m\\ncritical  forged\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}
