package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ghostwatch/ghostwatch/rule"
	"k8s.io/cli-runtime/pkg/genericiooptions"
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

// withCode makes err exit the process with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// findingsExit is returned when the command ran but found something: it
// sets the exit code without printing an error.
var errFindings = errors.New("findings at or above --fail-on")

// NewRootCommand builds the ghostwatch command tree writing to streams.
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "ghostwatch",
		Short: "Find, explain and safely clear the ghosts of Kubernetes networking",
		Long: `ghostwatch finds state that outlives the pod it belonged to when pod IPs are
recycled. The rules it runs:

` + ruleList(rule.All(rule.Config{})) + `
  ghostwatch scan      one-shot audit of this node and the cluster
  ghostwatch agent     the node DaemonSet: watch, export metrics, and (if asked) remove ghosts
  ghostwatch lab       rebuild an incident on the real kernel, in network namespaces

Exit codes: 0 nothing found at or above --fail-on, 1 findings, 2 could not run.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every duration flag of every command is a length of time: a
		// negative one is a mistake, never a way to turn something off.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Value.Type() == "duration" && err == nil {
					if v, perr := time.ParseDuration(f.Value.String()); perr == nil && v < 0 {
						err = withCode(ExitError, fmt.Errorf("--%s %s: a duration must not be negative", f.Name, f.Value))
					}
				}
			})
			return err
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(newScanCommand(streams), newAgentCommand(streams), newControllerCommand(streams), newLabCommand(streams), newVersionCommand(streams))
	return root
}

// Main runs the command line and returns the process exit code.
func Main() int {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	// Ctrl-C, a stop, or the terminal closing: each command ends through
	// its cleanup (the lab removes its namespaces, the agent stops).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	root := NewRootCommand(streams)
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		asKubectlPlugin(root)
	}
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
	if errors.Is(err, errFindings) {
		return ExitFindings
	}
	fmt.Fprintf(streams.ErrOut, "ghostwatch: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// asKubectlPlugin makes the help read as kubectl runs the binary, installed
// as kubectl-ghostwatch: "kubectl ghostwatch scan", in the usage lines and
// in every example and description.
func asKubectlPlugin(root *cobra.Command) {
	// The display name, not Use: cobra names a command by Use's first
	// word, which would make "kubectl scan".
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl ghostwatch"
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Long = pluginText(c.Long)
		c.Example = pluginText(c.Example)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// pluginText rewrites the commands a help text shows, "ghostwatch scan",
// as kubectl runs them.
func pluginText(s string) string {
	return commandWord.ReplaceAllString(s, "${1}kubectl ghostwatch ")
}

// commandWord is "ghostwatch " where a command line starts: at the start
// of a line (after indentation or a shell prompt) or after a pipe.
var commandWord = regexp.MustCompile(`(?m)(^\s*(?:\$ )?|\| )ghostwatch `)
