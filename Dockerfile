# Builds the weir binary and runs it on a slim base image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin weir

FROM debian:bookworm-slim
COPY --from=build /src/target/release/weir /usr/local/bin/weir
EXPOSE 9347 9348
# listening beyond loopback needs authentication (docs/security.md): give the superuser's
# password with -e WEIR_SUPERUSER_PASSWORD=... (or rules with --hba-file)
CMD ["weir", "serve", "--listen", "0.0.0.0:9347", "--data-dir", "/data"]
