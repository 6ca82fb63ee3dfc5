package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// outputNames are the -o values every command that prints a result shares:
// text is for people (scan's table, the lab's timeline); json and yaml are
// one object for programs, the same in both.
var outputNames = []string{"text", "json", "yaml"}

// addOutputFlag adds -o/--output to cmd, defaulting to text: usage says
// what text and the objects are for this command. Its shell completions
// are outputNames.
func addOutputFlag(cmd *cobra.Command, p *string, usage string) {
	cmd.Flags().StringVarP(p, "output", "o", "text", "output format: "+orList(outputNames)+"; "+usage)
	completeWith(cmd, "output", outputNames...)
}

// checkOutput returns the output name v stands for: one of outputNames, or
// what an older name in aliases maps to. Any other value is an error in the
// same words for every command.
func checkOutput(v string, aliases map[string]string) (string, error) {
	if to, ok := aliases[v]; ok {
		v = to
	}
	if !slices.Contains(outputNames, v) {
		return "", withCode(ExitError, fmt.Errorf("-o %q: want %s", v, orList(outputNames)))
	}
	return v, nil
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
