package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// version is set with -ldflags "-X github.com/ghostwatch/ghostwatch/cli.version=v0.1.0".
var version = "dev"

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
// from the build: the version set at link time, else the module's version
// (go install …@vX), else "dev"; the commit and Go version from the build
// info.
func versionLine() string {
	v, commit, modified, gov := version, "unknown", false, "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		gov = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if modified {
		commit += ", modified"
	}
	return fmt.Sprintf("ghostwatch %s (commit %s, %s)", v, commit, gov)
}
