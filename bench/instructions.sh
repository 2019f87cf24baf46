#!/usr/bin/env bash
# User-space instructions per request, counted by valgrind (callgrind), for sluice and for nginx
# limit_req doing the same job, in one invocation. Instruction counts do not depend on what else
# the machine is doing, so this compares the two on a busy machine too (bench/gateway.sh
# measures time and needs a quiet one). The kernel's share (syscalls, TCP) is not counted.
#
#   bash bench/instructions.sh              # 3 s of wrk -c4 per case
#   SECONDS_PER_CASE=5 bash bench/instructions.sh
#   SLUICE_BIN=/path/to/older/sluice bash bench/instructions.sh   # another build, no cargo
#
# Decision lines are not counted (callgrind's --toggle-collect leaves out DecisionLine::emit): the
# seed service writes at most 100 denial lines a second whatever the load, a cost per second that
# would be spread over as many requests as valgrind's speed let through that second, and the
# figure would move with the machine's load. Deciding whether to write a line is counted.
#
# Each server runs under callgrind twice: once for start-up and one request (subtracted), once
# under load; the difference divided by the requests served is its cost per request.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
SECS=${SECONDS_PER_CASE:-3}

for tool in valgrind:valgrind wrk:wrk nginx:nginx-light curl:curl; do
  cmd=${tool%%:*}; pkg=${tool##*:}
  if ! command -v "$cmd" >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    fi
    command -v "$cmd" >/dev/null 2>&1 || { echo "bench/instructions.sh: needs $cmd (apt-get install $pkg)" >&2; exit 1; }
  fi
done

SLUICE=$(sluice_binary)
dir=$(mktemp -d)
chmod 755 "$dir"
upstream_pid=""
cleanup() {
  [ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null || true
  [ -f "$dir/up/nginx.pid" ] && kill "$(cat "$dir/up/nginx.pid")" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

wait_url() { for _ in $(seq 300); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; echo "$1 never answered" >&2; exit 1; }

mkdir -p "$dir/www" "$dir/up"
chmod 755 "$dir/www"
printf '{"message":"allowed"}' > "$dir/www/hello.json"
UP=$(free_port)
cat > "$dir/up/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/up/nginx.pid;
error_log $dir/up/error.log crit;
events { worker_connections 1024; }
http { access_log off; default_type application/json; keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP; root $dir/www; location / { try_files /hello.json =404; } } }
NGINX
nginx -c "$dir/up/nginx.conf" -p "$dir/up"

# The front ends under measure, each on its own port: nginx in one process (no master), so that
# callgrind sees all of its work.
NGX=$(free_port)
cat > "$dir/front.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
pid $dir/front.pid;
error_log $dir/front.log crit;
events { worker_connections 1024; }
http { access_log off; default_type application/json;
  limit_req_zone \$binary_remote_addr zone=open:10m rate=100000000r/s;
  limit_req_zone \$binary_remote_addr zone=shut:10m rate=1r/m;
  limit_req_status 429;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server { listen 127.0.0.1:$NGX; root $dir/www;
    location = /api/hello { limit_req zone=open burst=100000000 nodelay; try_files /hello.json =404; }
    location = /api/shut { limit_req zone=shut; try_files /hello.json =404; }
    location = /hello.json { limit_req zone=open burst=100000000 nodelay;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://up/hello.json; } } }
NGINX
SP=$(free_port)
proxy_toml "$SP" "$UP" > "$dir/proxy.toml"
SEED=$(free_port)

# measure NAME URL LOAD(0|1) CMD... -> prints "instructions requests"
measure() {
  local name=$1 url=$2 load=$3; shift 3
  local out="$dir/cg.$name.$load"
  valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*DecisionLine::emit*' --collect-atstart=yes "$@" >/dev/null 2>"$out.log" &
  local pid=$!
  wait_url "$url"
  local requests=1
  if [ "$load" = 1 ]; then
    requests=$(wrk -t1 -c4 -d"${SECS}s" "$url" | awk '/requests in/ {print $1}')
    requests=$((requests + 1))
  fi
  kill -INT "$pid" 2>/dev/null || true
  # nginx under valgrind stops on QUIT; sluice on INT.
  sleep 0.5; kill -QUIT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local ir; ir=$(awk '/Collected :/ {print $NF}' "$out.log" | tail -1)
  echo "$ir $requests"
}

per_request() { # name url cmd...
  local name=$1 url=$2; shift 2
  read -r base _ < <(measure "$name" "$url" 0 "$@")
  read -r loaded n < <(measure "$name" "$url" 1 "$@")
  awk -v a="$base" -v b="$loaded" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / (n - 1) }'
}

echo "callgrind instructions per request (user space), wrk -t1 -c4 -d${SECS}s, $(nginx -v 2>&1)" >&2
n_proxy=$(per_request nginx-proxy "http://127.0.0.1:$NGX/hello.json" nginx -c "$dir/front.conf" -p "$dir")
s_proxy=$(per_request sluice-proxy "http://127.0.0.1:$SP/hello.json" "$SLUICE" serve --config "$dir/proxy.toml")
n_demo=$(per_request nginx-demo "http://127.0.0.1:$NGX/api/hello" nginx -c "$dir/front.conf" -p "$dir")
# The seed service reads its settings from the environment: set them here, not through `env`
# under valgrind (valgrind would count `env` and let the program it runs go uncounted).
s_demo=$(PORT=$SEED RATE_LIMIT_CAPACITY=1000000000 RATE_LIMIT_REFILL_PER_SECOND=100000000 \
  per_request sluice-demo "http://127.0.0.1:$SEED/api/hello" "$SLUICE" serve)
# Denied: every request but the first (the one that showed the server was up) is refused.
n_shut=$(per_request nginx-shut "http://127.0.0.1:$NGX/api/shut" nginx -c "$dir/front.conf" -p "$dir")
s_shut=$(PORT=$SEED RATE_LIMIT_CAPACITY=1 RATE_LIMIT_REFILL_PER_SECOND=0.0001 \
  per_request sluice-shut "http://127.0.0.1:$SEED/api/hello" "$SLUICE" serve)
printf '%-32s %10s %10s %8s\n' "case" "nginx" "sluice" "ratio"
printf '%-32s %10s %10s %8s\n' "proxy mode, admitted" "$n_proxy" "$s_proxy" "$(awk -v a="$s_proxy" -v b="$n_proxy" 'BEGIN { printf "%.2f", a / b }')"
printf '%-32s %10s %10s %8s\n' "demo route, admitted" "$n_demo" "$s_demo" "$(awk -v a="$s_demo" -v b="$n_demo" 'BEGIN { printf "%.2f", a / b }')"
printf '%-32s %10s %10s %8s\n' "demo route, denied" "$n_shut" "$s_shut" "$(awk -v a="$s_shut" -v b="$n_shut" 'BEGIN { printf "%.2f", a / b }')"
echo "(ratio: sluice's instructions per request over nginx's; below 1 is fewer)"
