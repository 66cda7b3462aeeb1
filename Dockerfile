# The megastore binary on Debian 12, built against Debian's RocksDB (docs/building.md).
#   docker build -t megastore:latest .      (docker-compose.yml builds it for you)

FROM rust:1-bookworm AS build
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libclang-dev librocksdb-dev protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p megastore-cli \
 && cp target/release/megastore /usr/local/bin/megastore

FROM debian:bookworm-slim
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends librocksdb7.8 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/megastore /usr/local/bin/megastore
ENTRYPOINT ["megastore"]
CMD ["--help"]
