package cmdline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// OutputNames are the -o values every command that prints a result shares:
// text is for people (scan's table, the lab's timeline); json and yaml are
// one object for programs, the same in both.
var OutputNames = []string{"text", "json", "yaml"}

// AddOutputFlag adds -o/--output to cmd, defaulting to text: usage says
// what text and the objects are for this command. Its shell completions
// are OutputNames.
func AddOutputFlag(cmd *cobra.Command, p *string, usage string) {
	cmd.Flags().StringVarP(p, "output", "o", "text", "output format: "+OrList(OutputNames)+"; "+usage)
	CompleteWith(cmd, "output", OutputNames...)
}

// CheckOutput returns the output name v stands for: one of OutputNames, or
// what an older name in aliases maps to. Any other value is an error in the
// same words for every command.
func CheckOutput(v string, aliases map[string]string) (string, error) {
	if to, ok := aliases[v]; ok {
		v = to
	}
	if !slices.Contains(OutputNames, v) {
		return "", WithCode(ExitError, fmt.Errorf("-o %q: want %s", v, OrList(OutputNames)))
	}
	return v, nil
}

// OrList joins names as "a, b or c".
func OrList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// CompleteWith offers values as the shell completions of the flag name.
func CompleteWith(cmd *cobra.Command, name string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}
