#!/usr/bin/env bash
# Builds a ghostwatch release into dist/: static, stripped binaries of
# ghostwatch for linux/amd64 and linux/arm64 (CGO_ENABLED=0, the version
# linked in), one tar.gz per platform holding the binary, LICENSE and
# README.md, their SHA256SUMS, and the krew plugin manifest (ghostwatch.yaml)
# filled with those checksums and checked against krew's rules. The image is
# the Dockerfile's: FROM scratch, the same build.
#
# Usage: scripts/dist.sh VERSION [URL-BASE]
#   VERSION   v-prefixed semantic version, e.g. v0.1.0
#   URL-BASE  where the archives are published (default: the GitHub
#             release of VERSION)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: scripts/dist.sh VERSION [URL-BASE]" >&2
  exit 2
fi
version=$1
base=${2:-https://github.com/ghostwatch/ghostwatch/releases/download/$version}
case "$version" in
  v[0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "dist: version $version: want a v-prefixed semantic version (v0.1.0)" >&2; exit 2 ;;
esac
out=dist
rm -rf "$out"
mkdir -p "$out"
ldflags="-s -w -X github.com/ghostwatch/ghostwatch/internal/buildinfo.version=$version"
for arch in amd64 arm64; do
  dir=$(mktemp -d)
  echo "dist: building ghostwatch $version linux/$arch" >&2
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dir/ghostwatch" ./cmd/ghostwatch
  cp LICENSE README.md "$dir/"
  tar -C "$dir" --owner=0 --group=0 --numeric-owner --mtime=1970-01-01 --sort=name \
    -czf "$out/ghostwatch_${version}_linux_${arch}.tar.gz" ghostwatch LICENSE README.md
  rm -rf "$dir"
done
(cd "$out" && sha256sum ghostwatch_*.tar.gz > SHA256SUMS)
go run ./internal/release/krewmanifest "$version" "$base" "$out/SHA256SUMS" > "$out/ghostwatch.yaml"
echo "dist: wrote" >&2
(cd "$out" && ls -l && cat SHA256SUMS) >&2
