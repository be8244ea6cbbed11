# syntax=docker/dockerfile:1
# The auditor image: a static binary on distroless (CA certificates, no
# shell), running as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t nova/auditor .
#   docker run nova/auditor version
#
# The build stage runs the same command as `make build`.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o bin/ ./cmd/...
# The data directory must exist and belong to the runtime user; distroless
# has no shell to create it.
RUN mkdir -p /out/var/lib/nova-auditor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/auditor /usr/local/bin/auditor
COPY --from=build --chown=65532:65532 /out/var/lib/nova-auditor /var/lib/nova-auditor
WORKDIR /var/lib/nova-auditor
ENV NOVA_AUDITOR_DATA_DIR=/var/lib/nova-auditor
USER 65532:65532
EXPOSE 9479
ENTRYPOINT ["auditor"]
CMD ["serve"]
