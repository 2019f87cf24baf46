#!/usr/bin/env bash
# sluice's rate-limit service (gRPC, memory store) against a tonic server answering a constant
# response, under the same Rust client on the same machine: decisions per second, p99, ratio.
#
#   bash bench/rls.sh                          # 5 s per case, 64 concurrent requests
#   RLS_BENCH_SECONDS=10 RLS_BENCH_CONCURRENCY=128 RLS_BENCH_CONNECTIONS=8 bash bench/rls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench -q -p sluice-rls --bench rls_load
