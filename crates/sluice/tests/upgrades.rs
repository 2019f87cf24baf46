//! Protocol upgrades through the gateway: `Upgrade: websocket` is refused with 501 (the gateway
//! relays no upgraded connection yet) instead of being passed on without its `Upgrade`; an
//! `Upgrade: h2c` request is served as the HTTP/1.1 request it also is, and neither its
//! `Upgrade` nor its `HTTP2-Settings` reaches the upstream (h2c smuggling), whatever its
//! `Connection` lists.

mod support;

use std::net::SocketAddr;

use support::raw::{Recorder, request, send};
use support::{Serve, TempDir};

const LIMITS: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 100
window = "1m"

[[route]]
path = "/*"
limits = [{ policy = "per-ip", key = "ip" }]
"#;

#[test]
fn websocket_upgrades_are_refused_and_h2c_never_reaches_the_upstream() {
    let up = Recorder::start();
    let dir = TempDir::new("upgrades");
    let toml = format!("[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nurl = \"http://{}\"\n{LIMITS}", up.addr);
    let gw = Serve::gateway(&dir.write("gateway.toml", &toml));
    let addr = SocketAddr::from(([127, 0, 0, 1], gw.port));
    let ask = |headers: &[(&str, &[u8])]| send(addr, &request("GET", "/chat", headers, b""));

    let websocket: &[(&str, &[u8])] = &[
        ("upgrade", b"websocket"),
        ("connection", b"Upgrade"),
        ("sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", b"13"),
    ];
    let r = ask(websocket);
    assert_eq!(r.status, 501, "{}", r.text());
    assert!(r.text().contains("upgrade_not_supported"), "{}", r.text());
    // Hidden behind h2c in a list, or in another case: refused too.
    assert_eq!(ask(&[("upgrade", b"h2c, WebSocket"), ("connection", b"upgrade")]).status, 501);

    // h2c: an HTTP/1.1 answer, and the upstream sees none of the upgrade.
    let settings: &[u8] = b"AAMAAABkAARAAAAAAAIAAAAA";
    let listed = ask(&[("upgrade", b"h2c"), ("connection", b"Upgrade, HTTP2-Settings"), ("http2-settings", settings)]);
    assert_eq!(listed.status, 200, "{}", listed.text());
    let unlisted = ask(&[("upgrade", b"h2c"), ("connection", b"Upgrade"), ("http2-settings", settings)]);
    assert_eq!(unlisted.status, 200);

    let seen = up.requests();
    assert_eq!(seen.len(), 2, "the refused upgrades never reached the upstream");
    for s in &seen {
        for name in ["upgrade", "http2-settings", "sec-websocket-key"] {
            assert!(s.all(name).is_empty(), "{name} reached the upstream: {:?}", s.all(name));
        }
        assert!(
            !s.all("connection").iter().any(|c| c.to_ascii_lowercase().contains("upgrade")),
            "{:?}",
            s.all("connection")
        );
    }
}
