#!/usr/bin/env bash
# Quota leases (`lease = "auto"`) against the per-request path, side by side in one run: four
# `sluice serve` gateways on one Redis, each loaded by its own wrk, on two traffic shapes:
#   hot     every request on one key (a fixed window shared by the whole fleet);
#   bucket  the same on a token bucket (its leases are holds: units set apart in Redis);
#   zipf    keys drawn from 100,000 with a Zipf law (s = 1.1): a few hot keys, a long cold tail.
# For each: decisions a second (wrk's requests, summed over the four) and Redis scripts a second
# (Redis's own INFO commandstats), with leases off and on. Limits the load never reaches: every
# decision admits, so the figures are the deciding, not the denying.
#
#   bash bench/leases.sh                       # 5 s per case
#   DURATION=10s bash bench/leases.sh
#   SLUICE_BIN=target/release/sluice bash bench/leases.sh   # a build already made
#
# Needs redis-server and wrk (apt-get install redis-server wrk; installed when missing, as root).
# Times depend on the machine and on what else runs: run it on a quiet one. On the 2-core
# machine everything shares (four gateways, four wrk, Redis), so the ratios matter more than
# the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-8}

for tool in redis-server:redis-server redis-cli:redis-server wrk:wrk; do
  cmd=${tool%%:*}; pkg=${tool##*:}
  if ! command -v "$cmd" >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    fi
    command -v "$cmd" >/dev/null 2>&1 || { echo "bench/leases.sh: needs $cmd (apt-get install $pkg)" >&2; exit 1; }
  fi
done

SLUICE=$(sluice_binary)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

REDIS=$(free_port)
redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$REDIS" ping >/dev/null 2>&1 && break; sleep 0.05; done

# A wrk script drawing each request's key: one key, or a Zipf law over 100,000.
cat > "$dir/hot.lua" <<'LUA'
request = function() return wrk.format("GET", "/hot") end
LUA
cat > "$dir/bucket.lua" <<'LUA'
request = function() return wrk.format("GET", "/bucket") end
LUA
cat > "$dir/zipf.lua" <<'LUA'
local n, s = 100000, 1.1
local cdf, total = {}, 0
for k = 1, n do total = total + 1 / k ^ s; cdf[k] = total end
for k = 1, n do cdf[k] = cdf[k] / total end
local function draw()
  local u, lo, hi = math.random(), 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end
init = function(args) math.randomseed(os.time() + (tonumber(args[1]) or 0)) end
request = function() return wrk.format("GET", "/spread", { ["X-Key"] = tostring(draw()) }) end
LUA

config() { # port lease
  cat <<TOML
[server]
listen = "127.0.0.1:$1"
key_secret = "shared-by-the-four-gateways-0123456789"
[store]
kind = "redis"
url = "redis://127.0.0.1:$REDIS"
on_error = "fail-closed"
[[policy]]
name = "fleet"
algorithm = "fixed-window"
limit = 1000000000
window = "1m"
lease = "$2"
[[policy]]
name = "bucket"
algorithm = "token-bucket"
capacity = 100000000
refill_per_second = 1000000
lease = "$2"
[[route]]
path = "/bucket"
limits = [{ policy = "bucket", key = "const:everyone" }]
[[route]]
path = "/hot"
limits = [{ policy = "fleet", key = "const:everyone" }]
[[route]]
path = "/spread"
limits = [{ policy = "fleet", key = "header:x-key" }]
TOML
}

scripts() { redis-cli -p "$REDIS" info commandstats | awk -F'[=,]' '/^cmdstat_evalsha:|^cmdstat_eval:/ {n += $2} END {print n + 0}'; }

# case lease shape -> "decisions/s scripts/s"
measure() {
  local lease=$1 shape=$2 ports=() gw=()
  for i in 1 2 3 4; do
    local port; port=$(free_port)
    config "$port" "$lease" > "$dir/g$i.toml"
    RUST_LOG=warn "$SLUICE" serve --config "$dir/g$i.toml" >/dev/null 2>&1 &
    gw+=($!); pids+=($!)
    ports+=("$port")
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$port/hot" && break; sleep 0.05; done
  done
  local before; before=$(scripts)
  local outs=()
  for i in 0 1 2 3; do
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$dir/$shape.lua" "http://127.0.0.1:${ports[$i]}" -- "$i" > "$dir/wrk.$i" 2>&1 &
    outs+=($!)
  done
  wait "${outs[@]}"
  local after; after=$(scripts)
  for p in "${gw[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  local rps; rps=$(cat "$dir"/wrk.? | awk '/^Requests\/sec/ {s += $2} END {printf "%.0f", s}')
  local secs; secs=$(echo "$DURATION" | tr -d 's')
  local non2xx; non2xx=$(cat "$dir"/wrk.? | awk '/Non-2xx/ {s += $NF} END {print s + 0}')
  [ "$non2xx" = 0 ] || { echo "bench/leases.sh: $non2xx answers were not 2xx ($lease, $shape)" >&2; exit 1; }
  echo "$rps $(( (after - before) / secs ))"
}

printf '%-34s %14s %14s %12s\n' "case (4 gateways, one Redis)" "decisions/s" "scripts/s" "per decision"
for shape in hot bucket zipf; do
  for lease in off auto; do
    read -r rps sps < <(measure "$lease" "$shape")
    printf '%-34s %14s %14s %12s\n' "$shape, lease = \"$lease\"" "$rps" "$sps" "$(awk -v a="$sps" -v b="$rps" 'BEGIN { printf "%.4f", a / b }')"
    eval "${shape}_${lease}=\"$rps $sps\""
  done
done
echo
for shape in hot bucket zipf; do
  off=${shape}_off; on=${shape}_auto
  read -r r0 s0 <<<"${!off}"; read -r r1 s1 <<<"${!on}"
  printf '%s: leases give %sx the decisions a second and %sx fewer Redis scripts a decision\n' "$shape" \
    "$(awk -v a="$r1" -v b="$r0" 'BEGIN { printf "%.2f", a / b }')" \
    "$(awk -v r0="$r0" -v s0="$s0" -v r1="$r1" -v s1="$s1" 'BEGIN { if (s1 == 0) print "inf"; else printf "%.1f", (s0 / r0) / (s1 / r1) }')"
done
