package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
)

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(streams.Out, versionLine())
			return err
		},
	}
}

// versionLine is "ghostwatch VERSION (commit COMMIT[, modified], GOVERSION)"
// from the build (internal/buildinfo).
func versionLine() string {
	i := buildinfo.Read()
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if i.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("ghostwatch %s (commit %s, %s)", i.Version, commit, i.GoVersion)
}
