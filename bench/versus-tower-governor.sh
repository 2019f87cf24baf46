#!/usr/bin/env bash
# sluice's library face against tower_governor's, as a user meets them: the same axum 0.8 app
# (a per-address limit, a burst of 2 then 1 a second, behind a trusted proxy at 127.0.0.1,
# served with ConnectInfo) in two fresh projects, one on sluice-tower (this checkout, default
# features), one on tower_governor 0.8 (`SmartIpKeyExtractor`, its extractor for apps behind
# proxies). Prints, for each:
#   - weight: the unique packages the build compiles (`cargo tree`, normal edges, the app itself
#     left out) and the time of a cold debug build in its own target directory;
#   - behaviour: 8 requests from one client that writes its own X-Forwarded-For entry, as the
#     proxy forwards them (`X-Forwarded-For: 10.0.0.N, 203.0.113.7`: the proxy appended the
#     address it saw), and the Retry-After of a denial.
#
#   bash bench/versus-tower-governor.sh
#
# The build times need a quiet machine: run nothing else meanwhile. Needs the registry and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

app_toml() { # name, dependency line
  cat <<TOML
[package]
name = "$1"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
axum = "0.8"
tokio = { version = "1", features = ["macros", "rt-multi-thread", "net"] }
$2

[workspace]
TOML
}

mkdir -p "$dir/with-sluice/src" "$dir/with-governor/src"
app_toml with-sluice "sluice-tower = { path = \"$repo/crates/sluice-tower\" }" > "$dir/with-sluice/Cargo.toml"
app_toml with-governor 'tower_governor = { version = "0.8", features = ["axum"] }' > "$dir/with-governor/Cargo.toml"

cat > "$dir/with-sluice/src/main.rs" <<'RS'
use std::net::SocketAddr;
use std::sync::Arc;

use axum::{Router, routing::get};
use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock, TokenBucket};

#[tokio::main]
async fn main() {
    let policy = NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(2, 1.0).unwrap().into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store))
        .limit("per-ip", "ip")
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .build()
        .unwrap();
    let app = Router::new().route("/", get(|| async { "hello" })).layer(limits);
    let listener = tokio::net::TcpListener::bind(std::env::var("ADDR").unwrap()).await.unwrap();
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
}
RS

cat > "$dir/with-governor/src/main.rs" <<'RS'
use std::net::SocketAddr;

use axum::{Router, routing::get};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;

#[tokio::main]
async fn main() {
    let config =
        GovernorConfigBuilder::default().per_second(1).burst_size(2).key_extractor(SmartIpKeyExtractor).finish().unwrap();
    let app = Router::new().route("/", get(|| async { "hello" })).layer(GovernorLayer::new(config));
    let listener = tokio::net::TcpListener::bind(std::env::var("ADDR").unwrap()).await.unwrap();
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
}
RS

printf '%-16s %10s %16s\n' "app" "packages" "cold build (s)"
for app in with-governor with-sluice; do
  (cd "$dir/$app" && cargo generate-lockfile -q && cargo fetch -q)
  packages=$(cd "$dir/$app" && cargo tree -e normal --prefix none -q | sed 's/ (.*//; s/ (\*)//' | sort -u | grep -v "^$app " | wc -l)
  start=$(date +%s.%N)
  (cd "$dir/$app" && CARGO_TARGET_DIR="$dir/$app/target" cargo build -q)
  end=$(date +%s.%N)
  printf '%-16s %10s %16.1f\n' "$app" "$packages" "$(echo "$end - $start" | bc)"
done
echo "(packages: unique crates compiled for the app, itself left out; build: cargo build, debug, $(nproc) cores)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
echo
printf '%-16s %28s %26s\n' "app" "spoofing client: passed of 8" "Retry-After of a denial"
for app in with-governor with-sluice; do
  ADDR="127.0.0.1:$port" "$dir/$app/target/debug/$app" & pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  passed=0
  for n in $(seq 8); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Forwarded-For: 10.0.0.$n, 203.0.113.7" "http://127.0.0.1:$port/")
    [ "$code" = 200 ] && passed=$((passed + 1))
  done
  # A client that does not spoof: its third request in a burst of 2 is denied.
  for _ in 1 2; do curl -s -o /dev/null -H "X-Forwarded-For: 203.0.113.8" "http://127.0.0.1:$port/"; done
  retry=$(curl -s -o /dev/null -D - -H "X-Forwarded-For: 203.0.113.8" "http://127.0.0.1:$port/" | tr -d '\r' |
    awk -F': ' 'NR == 1 { status = $0 } tolower($1) == "retry-after" { r = $2 } END { print (r == "" ? "none" : r) " (" status ")" }')
  printf '%-16s %28s %26s\n' "$app" "$passed" "$retry"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
echo "(a spoofing client's requests each name another 10.0.0.N before the address the proxy saw)"
