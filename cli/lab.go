package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
)

// errLabMoved is what `ghostwatch lab` answers: the lab is a binary of its
// own, so that this one, which the agent runs with NET_ADMIN, links none of
// it.
var errLabMoved = errors.New("the lab is its own binary: go run ./lab/cmd/ghostwatch-lab <incident> (or install github.com/ghostwatch/ghostwatch/lab/cmd/ghostwatch-lab)")

// newLabCommand is `ghostwatch lab`, whatever follows it: it says where the
// lab went and exits 2. It imports no lab code.
func newLabCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "lab",
		Short:              "The lab is its own binary: ghostwatch-lab",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(*cobra.Command, []string) error {
			return cmdline.WithCode(ExitError, errLabMoved)
		},
	}
}
