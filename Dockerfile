# Moonin's image: one statically linked binary and nothing else (no shell, no libc, no CA
# bundle: the manager talks only to the API server, whose CA the service account mounts; the
# time-zone database is compiled into the binary).
#
# The binary is built before this file runs, one per architecture, into dist/<arch>/moonin
# (cargo's `image` profile, see Cargo.toml). Every build of the image uses this file:
#   e2e/image build                       this machine: x86_64 glibc with +crt-static, podman
#   .github/workflows/release.yaml        a release: musl for amd64 and arm64, docker buildx
# The deployment (config/manager, charts/moonin) runs it as UID 65532 with a read-only root
# filesystem and no capabilities.
FROM scratch
ARG TARGETARCH
LABEL org.opencontainers.image.title="moonin" \
      org.opencontainers.image.description="Kubernetes operator: cluster discovery, scheduled scaling, warm sandbox pools" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY dist/${TARGETARCH}/moonin /moonin
USER 65532:65532
ENTRYPOINT ["/moonin"]
CMD ["run"]
