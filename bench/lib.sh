# What the benchmark scripts share (sourced, not run).

# The sluice binary under measure, as an absolute path: $SLUICE_BIN when set (an earlier build, to
# compare two versions in one sitting), else this checkout's release build, built first.
sluice_binary() {
  if [ -n "${SLUICE_BIN:-}" ]; then
    realpath "$SLUICE_BIN"
  else
    cargo build --release -q -p sluice >&2
    realpath "${CARGO_TARGET_DIR:-target}/release/sluice"
  fi
}

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# sluice in proxy mode on port $1, forwarding /hello.json to 127.0.0.1:$2 under a limit that
# never denies: the same job as nginx's `limit_req` + `proxy_pass` in the scripts.
proxy_toml() {
  cat <<TOML
[server]
listen = "127.0.0.1:$1"
headers = ["draft-6"]
[upstream]
url = "http://127.0.0.1:$2"
[[policy]]
name = "open"
algorithm = "token-bucket"
capacity = 1000000000
refill_per_second = 100000000
[[route]]
path = "/hello.json"
limits = [{ policy = "open", key = "ip" }]
TOML
}
