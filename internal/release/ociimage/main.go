// Command ociimage writes a release's image, from the binaries its archives
// hold, as an OCI image layout in one tar file, and prints the digest of its
// image index:
//
//	go run ./internal/release/ociimage VERSION OUT.oci.tar linux/amd64=PATH linux/arm64=PATH
//
// Push it with skopeo copy oci-archive:OUT.oci.tar:VERSION docker://REPOSITORY:VERSION,
// or load it with docker load -i OUT.oci.tar (Docker 25 or later).
package main

import (
	"fmt"
	"os"

	"github.com/ghostwatch/ghostwatch/internal/release/oci"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: ociimage VERSION OUT.oci.tar OS/ARCH=BINARY...")
		os.Exit(2)
	}
	var bins []oci.Binary
	for _, arg := range os.Args[3:] {
		b, err := oci.ParseBinary(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ociimage:", err)
			os.Exit(2)
		}
		bins = append(bins, b)
	}
	digest, err := oci.WriteFile(os.Args[2], os.Args[1], bins)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}
