# Two stages: a static binary built with the Go toolchain, then distroless (no shell, no
# package manager), running as the distroless nonroot user.
# The build stage runs on the builder's own platform and cross-compiles for the target
# (docker buildx build --platform linux/amd64,linux/arm64): no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY certs/ certs/
COPY internal/ internal/
COPY stamp/ stamp/
COPY watcher/ watcher/
COPY webhook/ webhook/
# Set by BuildKit from --platform (the target's OS and architecture).
ARG TARGETOS TARGETARCH
# The version configstamp reports: docker build --build-arg VERSION=$(git describe --tags).
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/configstamp ./cmd/configstamp

# `make image` builds an equivalent image without Docker and is the source of truth: keep the
# user, entrypoint, labels and build flags equal (hack/image TestDockerfileEquivalent).
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.version=${VERSION} org.opencontainers.image.source=https://github.com/configstamp/configstamp \
      org.opencontainers.image.revision=${REVISION} org.opencontainers.image.created=${CREATED}
COPY --from=build /out/configstamp /configstamp
USER 65532:65532
ENTRYPOINT ["/configstamp"]
