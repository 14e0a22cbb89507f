# quest: one static-ish binary on a slim Debian; SQLite lives in /data.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches
COPY tests ./tests
RUN cargo build --release --locked --bin quest

FROM debian:bookworm-slim
# ca-certificates: the email gate fetches HTTPS pages and verifies them.
# tini: PID 1 reaps what command gate programs leave behind; quest is not an init.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /data --uid 10001 quest \
    && mkdir -p /data && chown quest /data
COPY --from=build /src/target/release/quest /usr/local/bin/quest
USER quest
ENV QUEST_BIND=0.0.0.0:8080 QUEST_DATA_DIR=/data QUEST_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
# -s: tini also reaps as a subreaper when compose's `init: true` puts Docker's
# own init in front of it as PID 1.
ENTRYPOINT ["tini", "-s", "--", "quest"]
CMD ["serve"]
