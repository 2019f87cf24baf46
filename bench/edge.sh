#!/usr/bin/env bash
# The edge (issue 27): sluice's gateway over TLS, HTTP/1.1 and HTTP/2, against nginx with TLS,
# `http2` and `limit_req` doing the same job, same h2load load, one run. Prints requests per
# second, the ratios (above 1: sluice served more) and each server's p99 and p50 latency in ms.
# h2load prints no percentiles: they come from its per-request log (`--log-file`, one line a
# request: start time, status, microseconds until the end of the response), nearest rank over
# the requests of the run; h2load writes that log during both servers' runs alike.
#
#   bash bench/edge.sh                 # 10 s per case
#   DURATION=5 CLIENTS=32 STREAMS=10 bash bench/edge.sh
#   SLUICE_BIN=/path/to/older/sluice bash bench/edge.sh
#
# Cases: self-answered (sluice answers an admitted request itself; nginx serves a static file
# after limit_req) and proxied (both forward to the same static nginx upstream over plain
# HTTP/1.1, keep-alive), each with h2load over TLS HTTP/1.1 (`--h1`) and TLS HTTP/2 (`-m`
# streams per connection). The limit never denies: what is measured is the path of an admitted
# request. Needs a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-32}
STREAMS=${STREAMS:-10}

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  fi
  command -v "$1" >/dev/null 2>&1 || { echo "bench/edge.sh: needs $1 (apt-get install $2)" >&2; exit 1; }
}
need h2load nghttp2-client
need nginx nginx-light
need openssl openssl
service nginx stop >/dev/null 2>&1 || true

SLUICE=$(sluice_binary)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$dir/nginx.pid" "$dir/up/nginx.pid"; do
    if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

chmod 755 "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
chmod 644 "$dir/key.pem"
mkdir -p "$dir/www" "$dir/up"
chmod 755 "$dir/www" "$dir/up"
printf '{"message":"allowed"}' > "$dir/www/hello.json"

NGX=$(free_port); UP=$(free_port); SELF=$(free_port); PROXY=$(free_port)
# The upstream both proxies forward to: static nginx, one worker.
cat > "$dir/up/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/up/nginx.pid;
error_log $dir/up/error.log crit;
events { worker_connections 8192; }
http { access_log off; default_type application/json; keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP; root $dir/www; } }
NGINX
nginx -c "$dir/up/nginx.conf"
# nginx at the edge: TLS, http2, limit_req; /hello.json from a file, /proxy/ to the upstream.
cat > "$dir/nginx.conf" <<NGINX
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log crit;
events { worker_connections 8192; }
http {
  access_log off;
  default_type application/json;
  limit_req_zone \$binary_remote_addr zone=open:10m rate=100000000r/s;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX ssl http2;
    ssl_certificate $dir/cert.pem;
    ssl_certificate_key $dir/key.pem;
    keepalive_requests 1000000;
    root $dir/www;
    location = /hello.json { limit_req zone=open burst=1000000 nodelay; }
    location = /proxy/hello.json { limit_req zone=open burst=1000000 nodelay; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_pass http://up/hello.json; }
  }
}
NGINX
nginx -c "$dir/nginx.conf"
# sluice: the same limit (lib.sh's proxy configuration), with TLS; self-answered on one port
# (no upstream: the gateway answers an admitted request itself), proxied on another.
tls="[server.tls]
cert = \"$dir/cert.pem\"
key = \"$dir/key.pem\""
{ proxy_toml "$PROXY" "$UP"; echo "$tls"; } > "$dir/proxy.toml"
{ proxy_toml "$SELF" "$UP" | grep -v -e '^\[upstream\]' -e '^url = '; echo "$tls"; } > "$dir/self.toml"
for c in self proxy; do
  RUST_LOG=error "$SLUICE" serve --config "$dir/$c.toml" > /dev/null 2>&1 &
  pids+=($!)
done
for p in $NGX $UP $SELF $PROXY; do wait_port "$p"; done

# Requests per second of h2load against $1 with the protocol flags $2; each request's line in
# the log $3.
rate() {
  local out
  # shellcheck disable=SC2086 # $2 is a list of flags
  out=$(h2load -D "$DURATION" -c "$CLIENTS" -t 2 $2 --log-file "$3" "$1" 2>&1)
  if ! grep -q "status codes: [1-9][0-9]* 2xx, 0 3xx, 0 4xx, 0 5xx" <<<"$out"; then
    echo "bench/edge.sh: $1 did not answer 2xx only:" >&2; grep -E "status codes|requests:" <<<"$out" >&2; exit 1
  fi
  grep -o '[0-9.]* req/s' <<<"$out" | head -1 | cut -d' ' -f1
}

# "p50 p99" in ms of the requests in h2load's log $1 (tab-separated: start time, status, -1 for
# a failed stream, microseconds until the end of the response), nearest rank; removes the log.
percentiles() {
  local n
  awk -F'\t' '$2 != -1 {print $3}' "$1" | LC_ALL=C sort -n > "$1.sorted"
  n=$(wc -l < "$1.sorted")
  awk -v n="$n" 'BEGIN { a = int((n * 50 + 99) / 100); b = int((n * 99 + 99) / 100) }
    NR == a { p50 = $1 } NR == b { p99 = $1; exit }
    END { printf "%.2f %.2f\n", p50 / 1000, p99 / 1000 }' "$1.sorted"
  rm -f "$1" "$1.sorted"
}

printf '%-34s %12s %12s %7s %13s %14s %13s %14s\n' "case (h2load, ${DURATION}s, ${CLIENTS} clients)" "nginx req/s" "sluice req/s" "ratio" \
  "nginx p99 ms" "sluice p99 ms" "nginx p50 ms" "sluice p50 ms"
for proto in "TLS HTTP/1.1:--h1" "TLS HTTP/2:-m $STREAMS"; do
  name=${proto%%:*}; flags=${proto#*:}
  for c in "self-answered:https://127.0.0.1:$NGX/hello.json:https://127.0.0.1:$SELF/hello.json" \
           "proxied:https://127.0.0.1:$NGX/proxy/hello.json:https://127.0.0.1:$PROXY/hello.json"; do
    label=${c%%:*}; rest=${c#*:}
    ngx_url=${rest%:https*}; sl_url="https${rest##*:https}"
    n=$(rate "$ngx_url" "$flags" "$dir/h2load-nginx.log"); s=$(rate "$sl_url" "$flags" "$dir/h2load-sluice.log")
    np=$(percentiles "$dir/h2load-nginx.log"); sp=$(percentiles "$dir/h2load-sluice.log")
    read -r n50 n99 <<<"$np"; read -r s50 s99 <<<"$sp"
    printf '%-34s %12.0f %12.0f %7.2f %13s %14s %13s %14s\n' "$name, $label" "$n" "$s" "$(python3 -c "print($s/$n)")" \
      "$n99" "$s99" "$n50" "$s50"
  done
done
