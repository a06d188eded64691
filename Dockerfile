# Trestle's server image: built from source in Rust's image, run from Debian's slim one as an
# unprivileged user (uid 10001), its data in the /data volume, the readiness probe as its
# HEALTHCHECK. Build with `docker build -t trestle .` (or `podman build`); run it as
# docs/operations.md ("Container image") shows. CI cannot pull base images: `.ci/container`
# builds this file's final stage from scratch out of the release binary and the libraries it
# links, and runs it to a passing /readyz.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p trestle-server --bin trestle-server

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home trestle \
    && mkdir -p /data /etc/trestle && chown trestle:trestle /data
COPY --from=build /src/target/release/trestle-server /usr/local/bin/trestle-server
USER 10001:10001
WORKDIR /data
VOLUME /data
ENV TRESTLE_DATA_DIR=/data \
    TRESTLE_LISTEN=0.0.0.0:50051 \
    TRESTLE_HEALTH_LISTEN=0.0.0.0:8081
EXPOSE 50051 10002 8081 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/trestle-server", "probe", "http://127.0.0.1:8081/readyz"]
ENTRYPOINT ["/usr/local/bin/trestle-server"]
