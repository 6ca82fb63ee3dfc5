package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/rule"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes shared by all commands.
const (
	ExitOK       = cmdline.ExitOK       // nothing at or above --fail-on
	ExitFindings = cmdline.ExitFindings // findings at or above --fail-on
	ExitError    = cmdline.ExitError    // could not run, or evidence incomplete
)

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
  ghostwatch-lab       rebuild an incident on the real kernel, in network namespaces
                       (a binary of its own: go run ./lab/cmd/ghostwatch-lab)

Exit codes: 0 nothing found at or above --fail-on, 1 findings, 2 could not run.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every duration flag of every command is a length of time: a
		// negative one is a mistake, never a way to turn something off.
		PersistentPreRunE: cmdline.NoNegativeDurations,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(newScanCommand(streams), newIPCommand(streams), newCollectCommand(streams), newAnalyzeCommand(streams), newAgentCommand(streams), newControllerCommand(streams), newLabCommand(), newVersionCommand(streams))
	return root
}

// Main runs the command line and returns the process exit code.
func Main() int {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root := NewRootCommand(streams)
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		asKubectlPlugin(root)
	}
	return cmdline.Run(root, streams)
}

// Execute runs cmd with args and maps the outcome to an exit code, printing
// errors as one line "ghostwatch: <error>".
func Execute(ctx context.Context, cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) int {
	return cmdline.Execute(ctx, cmd, args, streams)
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

// The default ports of /metrics, /healthz and /readyz. The agent runs in
// the node's network namespace, so its port is a port of every node: it
// sits outside the Prometheus exporters' range (9100-9999, allocated in
// full, where node-exporter's 9100, the CSI sidecars' 9808 and 9809,
// Calico's 9091 and 9099 and Cilium's 9962-9965 listen), outside the
// Kubernetes components' 10248-10260, Antrea's 10349-10351, kube-router's
// 20241-20244 and node-problem-detector's 20256-20257, and below the
// NodePort range and the kernel's ephemeral ports (30000 and up). The
// controller runs in a pod network of its own and takes the next port.
// HistoryPort serves each controller replica's address history, on its
// loopback only: `ghostwatch ip` reaches it by port-forward, which the API
// server authorizes (pods/portforward in the controller's namespace).
// AgentAddressPort serves, on each agent's loopback, what its node's
// conntrack table holds for an address, to `ghostwatch ip`, likewise.
const (
	AgentPort        = 10280
	ControllerPort   = 10281
	HistoryPort      = 10282
	AgentAddressPort = 10283
)
