# Moonin's image: a static (musl) binary on a distroless, non-root base.
#   docker build -t ghcr.io/moonin/moonin:0.1.0 .
# config/manager/manager.yaml runs it as UID 65532 with a read-only root filesystem.

FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crds ./crds
COPY benches ./benches
COPY tests ./tests
COPY samples ./samples
COPY e2e/admission-cases.yaml ./e2e/admission-cases.yaml
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin moonin \
 && cp target/x86_64-unknown-linux-musl/release/moonin /moonin

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /moonin /moonin
USER 65532:65532
ENTRYPOINT ["/moonin"]
CMD ["run"]
