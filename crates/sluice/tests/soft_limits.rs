//! `enforce = "soft"` through the binary, in front of an upstream that records what reaches it:
//! a request over a soft limit is passed on, marked with `sluice-soft-limited`; a client cannot
//! forge the mark or hide it, on a limited route or on a path no route names.

mod support;

use std::net::SocketAddr;

use support::raw::{Recorder, request, send};
use support::{Serve, TempDir};

const CONFIG: &str = r#"
[[policy]]
name = "tenant-monthly"
algorithm = "fixed-window"
limit = 2
window = "30d"
enforce = "soft"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 100
window = "1h"

[[route]]
path = "/v1/*"
limits = [
  { policy = "tenant-monthly", key = "header:x-tenant" },
  { policy = "per-ip", key = "ip" },
]
"#;

#[test]
fn over_a_soft_limit_a_request_is_passed_on_and_marked() {
    marked_only_by_sluice("");
}

/// With `_` spellings forwarded, `sluice_soft_limited` (which WSGI and Rails applications read
/// as the mark) is still dropped.
#[test]
fn the_mark_cannot_be_forged_with_an_underscore_either() {
    marked_only_by_sluice("underscore_headers = \"forward\"");
}

fn marked_only_by_sluice(server: &str) {
    let up = Recorder::start();
    let dir = TempDir::new("soft-limits");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n{server}\n[upstream]\nurl = \"http://{}\"\n{CONFIG}",
        up.addr
    );
    let gw = Serve::gateway(&dir.write("gateway.toml", &toml));
    let addr = SocketAddr::from(([127, 0, 0, 1], gw.port));
    let forged = b"\"tenant-monthly\"".as_slice();
    let get = |path: &str, headers: &[(&str, &[u8])]| send(addr, &request("GET", path, headers, b""));

    // Within the soft limit: passed on unmarked, the client's forged mark removed.
    for forging in ["sluice-soft-limited", "sluice_soft_limited"] {
        let r = get("/v1/chat", &[("x-tenant", b"acme"), (forging, forged)]);
        assert_eq!(r.status, 200);
        // The client's rate-limit headers list the limits that can deny it, not the soft one.
        assert!(!r.header("ratelimit").unwrap_or("").contains("tenant-monthly"), "{:?}", r.headers);
    }
    // Over it: still passed on, and the upstream is told which limit.
    let r = get("/v1/chat", &[("x-tenant", b"acme"), ("sluice-soft-limited", b"\"nothing\"")]);
    assert_eq!(r.status, 200);
    // Another tenant, and a path no route names: unmarked whatever the client says.
    assert_eq!(get("/v1/chat", &[("x-tenant", b"other")]).status, 200);
    assert_eq!(get("/elsewhere", &[("sluice-soft-limited", forged), ("sluice_soft_limited", forged)]).status, 200);

    let seen = up.requests();
    let marks: Vec<Vec<&str>> =
        seen.iter().map(|s| [s.all("sluice-soft-limited"), s.all("sluice_soft_limited")].concat()).collect();
    assert_eq!(
        marks,
        [vec![], vec![], vec!["\"tenant-monthly\""], vec![], vec![]],
        "only the request over the soft limit is marked, by sluice alone"
    );
}
