# The ghostwatch image: one static binary, nothing else (no shell, no libc).
#   docker build -t ghcr.io/ghostwatch/ghostwatch:dev .
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
ENTRYPOINT ["/ghostwatch"]
