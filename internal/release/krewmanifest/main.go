// Command krewmanifest writes the krew plugin manifest of a release:
//
//	go run ./internal/release/krewmanifest VERSION URL-BASE SHA256SUMS > ghostwatch.yaml
//
// SHA256SUMS is sha256sum's output for the archives
// ghostwatch_VERSION_OS_ARCH.tar.gz, published under URL-BASE; its other
// lines (the image, ghostwatch_VERSION_image.oci.tar) are not read.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/release"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: krewmanifest VERSION URL-BASE SHA256SUMS")
		os.Exit(2)
	}
	version, base, sums := os.Args[1], strings.TrimSuffix(os.Args[2], "/"), os.Args[3]
	f, err := os.Open(sums)
	if err != nil {
		fmt.Fprintln(os.Stderr, "krewmanifest:", err)
		os.Exit(1)
	}
	defer f.Close()
	var archives []release.Archive
	sc := bufio.NewScanner(f)
	prefix := "ghostwatch_" + version + "_"
	for sc.Scan() {
		sum, name, ok := strings.Cut(strings.TrimSpace(sc.Text()), "  ")
		if !ok || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".tar.gz") {
			continue
		}
		osArch := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".tar.gz")
		goos, arch, ok := strings.Cut(osArch, "_")
		if !ok {
			continue
		}
		archives = append(archives, release.Archive{OS: goos, Arch: arch, URI: base + "/" + name, SHA256: sum})
	}
	b, err := release.Manifest(version, archives)
	if err != nil {
		fmt.Fprintln(os.Stderr, "krewmanifest:", err)
		os.Exit(1)
	}
	os.Stdout.Write(b)
}
