// Command ghostwatch finds, explains and safely clears the ghosts of
// Kubernetes networking. See `ghostwatch --help`.
package main

import (
	"os"

	"github.com/ghostwatch/ghostwatch/cli"
)

func main() {
	os.Exit(cli.Main())
}
