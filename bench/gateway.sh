#!/usr/bin/env bash
# sluice serve against nginx limit_req (and a Node peer of the seed tutorial's server), same wrk
# load, same machine, one run. Prints requests/second, p99 latency and the ratios.
#
#   bash bench/gateway.sh            # 10 s per case
#   DURATION=5s CONNECTIONS=64 bash bench/gateway.sh
#   SLUICE_BIN=/path/to/older/sluice bash bench/gateway.sh   # another build, no cargo
#
# Cases: the demo route /api/hello answered by the server itself, admitted and denied; and proxy
# mode, where both forward admitted requests to the same upstream (a separate static nginx
# process with one worker).
# nginx answers from a content handler (a static file): `return` would run before limit_req.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }
  fi
  command -v "$1" >/dev/null 2>&1 || { echo "bench/gateway.sh: needs $1 (apt-get install $2)" >&2; exit 1; }
}
need wrk wrk
need nginx nginx-light
service nginx stop >/dev/null 2>&1 || true

SLUICE=$(sluice_binary)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}" $(cat "$dir/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  for f in "$dir/nginx.pid" "$dir/up/nginx.pid"; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

NGX=$(free_port); UP=$(free_port)
mkdir -p "$dir/www"
chmod 755 "$dir" "$dir/www"  # nginx workers run unprivileged
printf '{"message":"allowed"}' > "$dir/www/hello.json"
cat > "$dir/nginx.conf" <<NGINX
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log crit;
events { worker_connections 8192; }
http {
  access_log off;
  default_type application/json;
  limit_req_zone \$binary_remote_addr zone=open:10m rate=100000000r/s;
  limit_req_zone \$binary_remote_addr zone=shut:10m rate=1r/m;
  limit_req_status 429;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX;
    root $dir/www;
    location = /api/hello  { limit_req zone=open burst=100000000 nodelay; try_files /hello.json =404; }
    location = /api/denied { limit_req zone=shut nodelay; try_files /hello.json =404; }
    location = /proxy/hello { limit_req zone=open burst=100000000 nodelay;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://up/hello.json; }
  }
}
NGINX
# The upstream is a process of its own for both front ends: inside the front nginx, a proxied
# request would never leave the worker that received it.
mkdir -p "$dir/up"
cat > "$dir/up/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/up/nginx.pid;
error_log $dir/up/error.log crit;
events { worker_connections 8192; }
http {
  access_log off;
  default_type application/json;
  keepalive_requests 100000;
  server { listen 127.0.0.1:$UP; root $dir/www; location / { try_files /hello.json =404; } }
}
NGINX
nginx -c "$dir/nginx.conf" -p "$dir"
nginx -c "$dir/up/nginx.conf" -p "$dir/up"
wait_port "$NGX"; wait_port "$UP"

# sluice, demo route: the seed service with a bucket that never runs dry / never refills.
start_seed() { # capacity refill
  local port; port=$(free_port)
  PORT=$port RATE_LIMIT_CAPACITY=$1 RATE_LIMIT_REFILL_PER_SECOND=$2 "$SLUICE" serve >/dev/null 2>&1 &
  echo "$!" >> "$dir/pids"  # this runs in a subshell: record the pid where cleanup finds it
  wait_port "$port"; echo "$port"
}
S_OPEN=$(start_seed 1000000000 100000000)
S_SHUT=$(start_seed 1 0.0001)

# sluice, proxy mode: the same limits, forwarding to the same upstream as nginx.
SP=$(free_port)
proxy_toml "$SP" "$UP" > "$dir/proxy.toml"
"$SLUICE" serve --config "$dir/proxy.toml" >/dev/null 2>&1 &
pids+=($!); wait_port "$SP"

NODE_OK=0
if command -v node >/dev/null 2>&1; then
  N_OPEN=$(free_port); N_SHUT=$(free_port)
  PORT=$N_OPEN RATE_LIMIT_CAPACITY=1000000000 RATE_LIMIT_REFILL_PER_SECOND=100000000 node bench/node-peer.js & pids+=($!)
  PORT=$N_SHUT RATE_LIMIT_CAPACITY=1 RATE_LIMIT_REFILL_PER_SECOND=0.0001 node bench/node-peer.js & pids+=($!)
  wait_port "$N_OPEN"; wait_port "$N_SHUT"; NODE_OK=1
fi

# Drain the one-token buckets before measuring the denied path.
for u in "http://127.0.0.1:$S_SHUT/api/hello" "http://127.0.0.1:$NGX/api/denied"; do
  for _ in 1 2 3; do curl -s -o /dev/null "$u" || true; done
done

run() { # name url expected-status -> "rps p99_ms"
  local out
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$2")
  local rps p99 non2xx
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
  # Check the status the case is about with one request.
  local code; code=$(curl -s -o /dev/null -w '%{http_code}' "$2")
  [ "$code" = "$3" ] || { echo "$1: expected HTTP $3, got $code" >&2; exit 1; }
  printf '%-34s %12s req/s   p99 %8s   non-2xx %s\n' "$1" "$rps" "$p99" "${non2xx:-0}" >&2
  echo "$rps $p99"
}

to_ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) { sub(/us$/,"",v); print v/1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v); print v } else if (v ~ /s$/) { sub(/s$/,"",v); print v*1000 } else print v }'; }

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $(nproc) cores, $(nginx -v 2>&1)" >&2
read -r n_ok n_ok99 < <(run "nginx limit_req, admitted" "http://127.0.0.1:$NGX/api/hello" 200)
read -r s_ok s_ok99 < <(run "sluice serve, admitted" "http://127.0.0.1:$S_OPEN/api/hello" 200)
read -r n_no n_no99 < <(run "nginx limit_req, denied" "http://127.0.0.1:$NGX/api/denied" 429)
read -r s_no s_no99 < <(run "sluice serve, denied" "http://127.0.0.1:$S_SHUT/api/hello" 429)
read -r n_px n_px99 < <(run "nginx limit_req + proxy_pass" "http://127.0.0.1:$NGX/proxy/hello" 200)
read -r s_px s_px99 < <(run "sluice gateway, proxy" "http://127.0.0.1:$SP/hello.json" 200)
if [ "$NODE_OK" = 1 ]; then
  read -r j_ok j_ok99 < <(run "node (seed tutorial), admitted" "http://127.0.0.1:$N_OPEN/api/hello" 200)
  read -r j_no j_no99 < <(run "node (seed tutorial), denied" "http://127.0.0.1:$N_SHUT/api/hello" 429)
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a/b }'; }
echo
echo "ratios (sluice / peer requests per second; p99 sluice vs peer in ms):"
echo "  demo route, admitted: $(ratio "$s_ok" "$n_ok")x nginx   p99 $(to_ms "$s_ok99") vs $(to_ms "$n_ok99")"
echo "  demo route, denied:   $(ratio "$s_no" "$n_no")x nginx   p99 $(to_ms "$s_no99") vs $(to_ms "$n_no99")"
echo "  proxy mode, admitted: $(ratio "$s_px" "$n_px")x nginx   p99 $(to_ms "$s_px99") vs $(to_ms "$n_px99")"
if [ "$NODE_OK" = 1 ]; then
  echo "  demo route, admitted: $(ratio "$s_ok" "$j_ok")x node"
  echo "  demo route, denied:   $(ratio "$s_no" "$j_no")x node"
fi
