# syntax=docker/dockerfile:1
# The auditor image: a static binary on distroless (CA certificates, no
# shell), running as a non-root user.
#
#   docker build --build-arg BUILD=$(git describe --always --dirty) -t nova/auditor:v$(make -s version) .
#   docker run nova/auditor version
#
# The version is the binary's (cmd/auditor/version.go, the one place it is
# defined; the manifests in deploy/kubernetes name the image by it); BUILD
# only adds the source revision as its build metadata.
#   docker run -p 9479:9479 -e NOVA_AUDITOR_STAR=s1 -e NOVA_AUDITOR_DATABASE_URL=... nova/auditor
#
# The build stage runs the same command as `make build`.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG BUILD=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.build=${BUILD}" -o bin/ ./cmd/...
# The data directory must exist and belong to the runtime user; distroless
# has no shell to create it.
RUN mkdir -p /out/var/lib/nova-auditor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/auditor /usr/local/bin/auditor
COPY --from=build --chown=65532:65532 /out/var/lib/nova-auditor /var/lib/nova-auditor
WORKDIR /var/lib/nova-auditor
ENV NOVA_AUDITOR_DATA_DIR=/var/lib/nova-auditor
# In a container, loopback is unreachable from outside: listen on every
# interface (docker run -p 9479:9479 works). The binary's own default stays
# 127.0.0.1:9479; --http-addr or this variable overrides either.
ENV NOVA_AUDITOR_HTTP_ADDR=0.0.0.0:9479
USER 65532:65532
EXPOSE 9479
ENTRYPOINT ["auditor"]
CMD ["serve"]
