# The ghostwatch image: one static binary, nothing else (no shell, no libc).
#   docker build -t ghcr.io/ghostwatch/ghostwatch:dev .
# A release's image is written without a daemon from the binaries its
# archives hold (scripts/dist.sh); this builds the same image from source.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/ghostwatch/ghostwatch/internal/buildinfo.version=${VERSION}" \
      -o /ghostwatch ./cmd/ghostwatch

FROM scratch
COPY --from=build /ghostwatch /ghostwatch
# Non-root unless the pod says otherwise (the agent runs as root for
# CAP_NET_ADMIN), as the release's image (internal/release/oci) does.
USER 65532:65532
ENTRYPOINT ["/ghostwatch"]
