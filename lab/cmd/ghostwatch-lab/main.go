// Command ghostwatch-lab rebuilds the incidents ghostwatch finds on this
// machine's kernel, in network namespaces. See `ghostwatch-lab --help`.
package main

import (
	"os"

	"github.com/ghostwatch/ghostwatch/lab/labcmd"
)

func main() {
	os.Exit(labcmd.Main())
}
