#!/usr/bin/env bash
# The weight of sluice's library face against tower_governor's, as a user meets it: the same
# axum 0.8 app (one per-address limit, served with ConnectInfo) in two fresh projects, one on
# sluice-tower (this checkout, default features), one on tower_governor 0.8. Prints, for each,
# the unique packages the build compiles (`cargo tree`, normal edges, the app itself left out)
# and the time of a cold debug build in its own target directory.
#
#   bash bench/library-weight.sh
#
# The build times need a quiet machine: run nothing else meanwhile. Needs the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

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
    let policy = NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(10, 1.0).unwrap().into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store)).limit("per-ip", "ip").build().unwrap();
    let app = Router::new().route("/", get(|| async { "hello" })).layer(limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
}
RS

cat > "$dir/with-governor/src/main.rs" <<'RS'
use std::net::SocketAddr;

use axum::{Router, routing::get};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

#[tokio::main]
async fn main() {
    let config = GovernorConfigBuilder::default().per_second(1).burst_size(10).finish().unwrap();
    let app = Router::new().route("/", get(|| async { "hello" })).layer(GovernorLayer::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
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
