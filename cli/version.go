package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
)

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return cmdline.VersionCommand("ghostwatch", streams)
}
