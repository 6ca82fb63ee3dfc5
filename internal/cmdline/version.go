package cmdline

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
)

// VersionCommand is the version command of the binary called name: it
// prints VersionLine(name).
func VersionCommand(name string, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(streams.Out, VersionLine(name))
			return err
		},
	}
}

// VersionLine is "NAME VERSION (commit COMMIT[, modified], GOVERSION)" from
// the build (internal/buildinfo).
func VersionLine(name string) string {
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
	return fmt.Sprintf("%s %s (commit %s, %s)", name, i.Version, commit, i.GoVersion)
}
