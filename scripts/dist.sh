#!/usr/bin/env bash
# Builds a ghostwatch release into dist/: static, stripped binaries of
# ghostwatch for linux/amd64 and linux/arm64 (CGO_ENABLED=0, the version
# linked in), one tar.gz per platform holding the binary, LICENSE and
# README.md, the image (ghostwatch_VERSION_image.oci.tar: an OCI image
# layout in one tar, linux/amd64 and linux/arm64, /ghostwatch alone, run as
# 65532:65532) written from the very binaries the archives hold, their
# SHA256SUMS, and the krew plugin manifest (ghostwatch.yaml) filled with the
# archives' checksums and checked against krew's rules. No container daemon
# is needed; the image is pushed with skopeo or loaded with docker load
# (Docker 25 or later), as the script prints at the end.
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
# The built binaries stay here until the image is written from them.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ldflags="-s -w -X github.com/ghostwatch/ghostwatch/internal/buildinfo.version=$version"
image=ghostwatch_${version}_image.oci.tar
binaries=()
for arch in amd64 arm64; do
  dir=$work/linux_$arch
  mkdir -p "$dir"
  echo "dist: building ghostwatch $version linux/$arch" >&2
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dir/ghostwatch" ./cmd/ghostwatch
  cp LICENSE README.md "$dir/"
  tar -C "$dir" --owner=0 --group=0 --numeric-owner --mtime=1970-01-01 --sort=name \
    -czf "$out/ghostwatch_${version}_linux_${arch}.tar.gz" ghostwatch LICENSE README.md
  binaries+=("linux/$arch=$dir/ghostwatch")
done
echo "dist: writing the image $image from those binaries" >&2
digest=$(go run ./internal/release/ociimage "$version" "$out/$image" "${binaries[@]}")
# krewmanifest reads the archives' lines (ghostwatch_VERSION_OS_ARCH.tar.gz) only.
(cd "$out" && sha256sum ghostwatch_*.tar.gz "$image" > SHA256SUMS)
go run ./internal/release/krewmanifest "$version" "$base" "$out/SHA256SUMS" > "$out/ghostwatch.yaml"
echo "dist: wrote" >&2
(cd "$out" && ls -l && cat SHA256SUMS) >&2
cat >&2 <<EOF
dist: the image's index digest is $digest; push both platforms with
  skopeo copy --all oci-archive:$out/$image:$version docker://ghcr.io/ghostwatch/ghostwatch:$version
or load this machine's platform into Docker (25 or later) with
  docker load -i $out/$image
EOF
