#!/usr/bin/env bash
# Throughput of `sluice simulate --access-log`: generates a combined access log and a gateway
# configuration of three routes, runs the release binary over it, and prints lines per second.
#
#   bash bench/access-log.sh            # 2,000,000 lines
#   bash bench/access-log.sh 10000000   # more
#   COMPRESS=1 bash bench/access-log.sh # the same log gzip-compressed
#
# The log: 1,000 requests per second of log time from 20,000 addresses (a few of them loud),
# 40% to /api/..., 30% to /search, 10% POST /login, the rest unmatched; 2% of the lines are
# written up to 1 s late, as concurrent workers do. Only the simulation is timed, not the
# generation. Run it on a quiet machine: the figure is one core's.
set -euo pipefail
cd "$(dirname "$0")/.."

lines="${1:-2000000}"
# shellcheck source=bench/lib.sh
. bench/lib.sh
bin=$(sluice_binary)

dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

cat >"$dir/gateway.toml" <<'EOF'
[[policy]]
name = "login"
algorithm = "fixed-window"
limit = 5
window = "1m"

[[policy]]
name = "api"
algorithm = "token-bucket"
capacity = 20
refill_per_second = 2

[[policy]]
name = "search"
algorithm = "sliding-window"
limit = 30
window = "10s"

[[route]]
path = "/login"
methods = ["POST"]
limits = [{ policy = "login", key = "ip" }]

[[route]]
path = "/api/*"
limits = [{ policy = "api", key = "header:x-api-key|ip" }]

[[route]]
path = "/search"
limits = [{ policy = "search", key = ["ip", "route"] }]
EOF

awk -v n="$lines" 'BEGIN {
  seed = 12345
  for (i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648
    r = seed % 1000
    # One in ten requests comes from one of 20 loud clients.
    client = (r < 100) ? r % 20 : int(seed / 1000) % 20000
    ip = "198.51." (100 + int(client / 250)) "." (client % 250)
    if (r < 400) { req = "GET /api/items/" (seed % 97) "?page=2 HTTP/1.1" }
    else if (r < 700) { req = "GET /search?q=" (seed % 13) " HTTP/1.1" }
    else if (r < 800) { req = "POST /login HTTP/1.1" }
    else { req = "GET /static/app.js HTTP/1.1" }
    t = int(i / 1000)
    if (r % 50 == 7 && t > 0) { t -= 1 }
    printf "%s - - [10/Oct/2000:%02d:%02d:%02d +0000] \"%s\" 200 %d \"-\" \"bench/1.0\"\n",
      ip, int(t / 3600) % 24, int(t / 60) % 60, t % 60, req, 100 + seed % 5000
  }
}' >"$dir/access.log"

log="$dir/access.log"
if [ "${COMPRESS:-0}" = "1" ]; then
  gzip -1 "$log"
  log="$log.gz"
fi
size="$(wc -c <"$log")"

start="$(date +%s.%N)"
"$bin" simulate --config "$dir/gateway.toml" --access-log "$log" --format json >"$dir/report.json"
end="$(date +%s.%N)"

awk -v n="$lines" -v s="$start" -v e="$end" -v b="$size" 'BEGIN {
  secs = e - s
  printf "%d lines (%.1f MB) in %.3f s: %.0f lines/s, %.0f MB/s\n", n, b / 1e6, secs, n / secs, b / 1e6 / secs
}'
grep -E '"(lines|requests|malformed|late|unmatched)"' "$dir/report.json" | head -5 | tr -d ' ,' | paste -sd ' '
