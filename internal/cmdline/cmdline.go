package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/internal/text"
)

// Exit codes shared by all commands.
const (
	ExitOK       = 0 // nothing at or above --fail-on
	ExitFindings = 1 // findings at or above --fail-on
	ExitError    = 2 // could not run, or evidence incomplete
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// WithCode makes err exit the process with code.
func WithCode(code int, err error) error { return &exitError{code: code, err: err} }

// ErrFindings is returned when the command ran but found something: it
// sets the exit code without printing an error.
var ErrFindings = errors.New("findings at or above --fail-on")

// Run runs root with the process's arguments and returns the process exit
// code. Ctrl-C, a stop, or the terminal closing cancel the context the
// command runs with: each command ends through its cleanup (the lab removes
// its namespaces, the agent stops).
func Run(root *cobra.Command, streams genericiooptions.IOStreams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return Execute(ctx, root, os.Args[1:], streams)
}

// Execute runs cmd with args and maps the outcome to an exit code, printing
// errors as one line "ghostwatch: <error>".
func Execute(ctx context.Context, cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) int {
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, ErrFindings) {
		return ExitFindings
	}
	// Whatever the error quotes, the user information of a URL (a token
	// given as its user name) is not printed, and what it quotes of a
	// server's answer or a file (a newline, a terminal's escape sequence)
	// is shown escaped, on the one line.
	fmt.Fprintf(streams.ErrOut, "ghostwatch: %s\n", text.Escape(redact.Text(err.Error())))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// NoNegativeDurations is a root command's PersistentPreRunE: every duration
// flag of every command is a length of time, and a negative one is a
// mistake, never a way to turn something off.
func NoNegativeDurations(cmd *cobra.Command, _ []string) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Value.Type() == "duration" && err == nil {
			if v, perr := time.ParseDuration(f.Value.String()); perr == nil && v < 0 {
				err = WithCode(ExitError, fmt.Errorf("--%s %s: a duration must not be negative", f.Name, f.Value))
			}
		}
	})
	return err
}
