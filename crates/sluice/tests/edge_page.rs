//! The book's "At the edge" page (`docs/src/edge.md`), run as a new user follows it. Its
//! configuration is read from the page itself: the TLS and HTTP/2 gateway of its first TOML
//! block, with the `[upstream]` of "https upstreams" and the policy, route and
//! `tunnel_idle_timeout` of "WebSockets" put into it, as a user combines them; only the listen
//! address, the certificate paths and the upstream's address and authority are the test's.
//! Its console commands are run as shown (`sluice check-config`, `curl --http2 -sI`, `h2load`,
//! pointed at the test's port) and must print what the page prints: `HTTP/2 200` and h2load's
//! `status codes: 19 2xx, 0 3xx, 81 4xx, 0 5xx`. Then WebSockets over TLS (a Python client,
//! `support/wss.py`) go through the gateway to an https upstream that echoes them, which says
//! it was spoken to in TLS with the URL's host by SNI; five are held open at once and the sixth
//! is answered 429, as the page says, until one closes.

mod support;

use support::certs::{authority, run, server_certificate};
use support::{PythonServer, SLUICE, Serve, TempDir};

/// The page, as the book shows it.
const PAGE: &str = include_str!("../../../docs/src/edge.md");

/// The WebSocket client over TLS (and the upstream, started through `PythonServer`).
const WSS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/wss.py");

/// The first block fenced as ```` ```{lang} ```` in the page's section `heading`.
fn block(heading: &str, lang: &str) -> &'static str {
    let section = PAGE.split(&format!("\n{heading}\n")).nth(1).unwrap_or_else(|| panic!("edge.md has no {heading:?}"));
    let section = section.split("\n## ").next().unwrap();
    let fence = format!("```{lang}\n");
    section
        .split(&fence)
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("no {lang} block under {heading:?} in edge.md"))
}

/// Fails, printing `block`, unless it contains each of `needles`: an edit of the page that
/// breaks what this test relies on must say so, not pass or fail somewhere further.
fn relies_on(block: &str, needles: &[&str]) {
    for needle in needles {
        assert!(block.contains(needle), "edge.md's block no longer has {needle:?}; the test relies on it:\n{block}");
    }
}

/// A TOML block's tables in order: each header line (`[server]`, `[[route]]`) with its lines.
fn tables(block: &str) -> Vec<(String, Vec<String>)> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        if line.starts_with('[') {
            tables.push((line.trim().to_string(), Vec::new()));
        } else if let Some((_, lines)) = tables.last_mut() {
            lines.push(line.to_string());
        } else {
            assert!(line.trim().is_empty() || line.starts_with('#'), "a line before any table: {line:?}\n{block}");
        }
    }
    tables
}

/// The tables' headers, to check a block's shape.
fn headers(tables: &[(String, Vec<String>)]) -> Vec<&str> {
    tables.iter().map(|(h, _)| h.as_str()).collect()
}

/// `lines` with the line setting `key` set to the string `value` (its comment dropped).
fn set(mut lines: Vec<String>, key: &str, value: &str) -> Vec<String> {
    let at = lines
        .iter()
        .position(|l| l.split('=').next().is_some_and(|k| k.trim() == key))
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"));
    lines[at] = format!("{key} = \"{value}\"");
    lines
}

/// The value of the string `key` in `lines`.
fn get<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == key).map(|(_, v)| v))
        .and_then(|v| v.split('"').nth(1))
        .unwrap_or_else(|| panic!("no string {key} in {lines:?}"))
}

/// The page's configuration as a user puts it together: the gateway of its first block with the
/// https `[upstream]` and the WebSockets block merged in, on the test's port, certificates and
/// upstream. Also the port the page's gateway listens on, which its commands name.
fn edge_config(cert: &(String, String), upstream: &str, ca: &str) -> (String, u16) {
    let gateway = block("## A gateway that speaks TLS and HTTP/2", "toml");
    relies_on(
        gateway,
        &["cert = ", "key = ", "name = \"per-ip\"", "algorithm = \"fixed-window\"", "limit = 20", "window = \"1m\""],
    );
    relies_on(gateway, &["path = \"/*\"", "policy = \"per-ip\", key = \"ip\""]);
    let gateway = tables(gateway);
    let shape = ["[server]", "[server.tls]", "[upstream]", "[[policy]]", "[[route]]"];
    assert_eq!(headers(&gateway), shape, "edge.md's first block changed shape");

    let https = block("## https upstreams", "toml");
    relies_on(https, &["[upstream]", "url = \"https://", "ca = "]);
    let https = tables(https);
    assert_eq!(headers(&https), ["[upstream]"], "edge.md's https upstream block changed shape");

    let sockets = block("## WebSockets", "toml");
    relies_on(sockets, &["tunnel_idle_timeout = ", "name = \"sockets-per-ip\"", "algorithm = \"concurrency\""]);
    relies_on(sockets, &["max_in_flight = 5", "path = \"/ws/*\"", "upgrades = [\"websocket\"]"]);
    let sockets = tables(sockets);
    assert_eq!(headers(&sockets), ["[server]", "[[policy]]", "[[route]]"], "edge.md's WebSockets block changed shape");

    let page_port = get(&gateway[0].1, "listen").rsplit(':').next().unwrap().parse().expect("a port in listen");
    let mut config = Vec::new();
    let mut table = |header: &str, lines: Vec<String>| {
        config.push(header.to_string());
        config.extend(lines);
        config.push(String::new());
    };
    // `tunnel_idle_timeout` is a `[server]` key: a second `[server]` table would be refused.
    let mut server = set(gateway[0].1.clone(), "listen", "127.0.0.1:0");
    server.extend(sockets[0].1.iter().filter(|l| !l.trim().is_empty()).cloned());
    table("[server]", server);
    table("[server.tls]", set(set(gateway[1].1.clone(), "cert", &cert.0), "key", &cert.1));
    table("[upstream]", set(set(https[0].1.clone(), "url", upstream), "ca", ca));
    table("[[policy]]", gateway[3].1.clone());
    table("[[policy]]", sockets[1].1.clone());
    // Routes match in file order, the first match winning: after `/*`, `/ws/*` would never be
    // reached, and WebSockets would meet `/*`, which has no `upgrades` and refuses them 501.
    table("[[route]]", sockets[2].1.clone());
    table("[[route]]", gateway[4].1.clone());
    (config.join("\n"), page_port)
}

/// The page's console commands under the gateway's configuration: each command (after `$ `)
/// with the lines it prints.
fn console() -> Vec<(String, Vec<String>)> {
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    for line in block("## A gateway that speaks TLS and HTTP/2", "console").lines() {
        match line.strip_prefix("$ ") {
            Some(command) => commands.push((command.to_string(), Vec::new())),
            None => commands.last_mut().expect("output after a command").1.push(line.to_string()),
        }
    }
    commands
}

/// `command`'s words up to a pipe, its URL (the word starting `https://`) pointed at `port` on
/// the same host: `(words, host)`. The page's URL must name the port its gateway listens on.
fn on_port(command: &str, page_port: u16, port: u16) -> (Vec<String>, String) {
    let mut host = None;
    let words = command
        .split(" | ")
        .next()
        .unwrap()
        .split_whitespace()
        .map(|w| match w.strip_prefix("https://") {
            Some(rest) => {
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let (name, p) = authority.rsplit_once(':').unwrap_or_else(|| panic!("no port in {w}"));
                assert_eq!(p, page_port.to_string(), "`{command}` is not on the page's listen port");
                host = Some(name.to_string());
                format!("https://{name}:{port}{path}")
            }
            None => w.to_string(),
        })
        .collect();
    (words, host.unwrap_or_else(|| panic!("no https:// URL in `{command}`")))
}

#[test]
fn the_edge_page_runs_as_written() {
    let dir = TempDir::new("edge-page");
    // The names of the page's files: the gateway's certificate for api.example (its clients
    // trust edge-ca), the upstream's signed by internal-ca, the `ca` of `[upstream]`.
    let edge_ca = authority(dir.dir(), "edge-ca");
    let cert = server_certificate(dir.dir(), &edge_ca, "api.example", "DNS:api.example", 2);
    let internal_ca = authority(dir.dir(), "internal-ca");
    let internal = server_certificate(dir.dir(), &internal_ca, "api.internal", "DNS:localhost", 2);
    let upstream = PythonServer::start("wss.py", &["serve", &internal.0, &internal.1]);
    // localhost, not the page's api.internal, which does not resolve here; it is also the name
    // the upstream must hear by SNI.
    let url = format!("https://localhost:{}", upstream.port);
    let (config, page_port) = edge_config(&cert, &url, &internal_ca.0);
    let file = dir.write("edge.toml", &config);

    let commands = console();
    let shown: Vec<&str> = commands.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(shown.len(), 3, "edge.md's console block changed: {commands:?}");
    assert!(shown[0].starts_with("sluice check-config edge.toml && sluice serve --config edge.toml"), "{shown:?}");
    assert!(shown[1].starts_with("curl --http2 -sI https://") && shown[1].ends_with("| head -1"), "{shown:?}");
    assert!(shown[2].starts_with("h2load -n 100 -c 2 -m 10 https://"), "{shown:?}");

    // $ sluice check-config edge.toml && sluice serve --config edge.toml &
    let out = run(SLUICE, &["check-config", &file]);
    assert!(out.status.success(), "check-config refused:\n{}\n{config}", String::from_utf8_lossy(&out.stderr));
    let gw = Serve::gateway(&file);
    assert!(gw.first_line.contains("https://"), "not a TLS listener: {}", gw.first_line);

    // The page's 20 a minute is a fixed window on the clock's minutes: curl and h2load must
    // fall in one, or h2load is given a fresh 20. So not in a minute's last 10 seconds.
    let into_minute = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() % 60;
    if into_minute >= 50 {
        std::thread::sleep(std::time::Duration::from_secs(61 - into_minute));
    }

    // $ curl --http2 -sI https://api.example:8443/v1/items | head -1
    // Added: the test CA to trust, api.example resolved to the gateway, and a time bound.
    let (mut words, host) = on_port(&commands[1].0, page_port, gw.port);
    let resolve = format!("{host}:{}:127.0.0.1", gw.port);
    words.splice(
        1..1,
        ["--max-time", "10", "--cacert", edge_ca.0.as_str(), "--resolve", resolve.as_str()].map(String::from),
    );
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let out = run(&words[0], &args);
    let head = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    // curl ends its HTTP/2 status line with a space, which the page (and Markdown) drops.
    assert_eq!(head.lines().next().map(str::trim_end), commands[1].1.first().map(String::as_str), "curl: {head}");
    // The answer is the https upstream's, which heard TLS and the URL's host by SNI.
    let tls = head.lines().find_map(|l| l.strip_prefix("x-upstream-tls: ")).unwrap_or_else(|| panic!("{head}"));
    assert!(tls.starts_with("TLSv1.") && tls.ends_with(" sni=localhost"), "{tls}");

    // $ h2load -n 100 -c 2 -m 10 https://api.example:8443/v1/items | grep 'status codes'
    // h2load checks no certificate; it is only told where api.example is.
    let (mut words, _) = on_port(&commands[2].0, page_port, gw.port);
    words.insert(1, format!("--connect-to=127.0.0.1:{}", gw.port));
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let out = run(&words[0], &args);
    let text = String::from_utf8_lossy(&out.stdout);
    let codes = text.lines().find(|l| l.starts_with("status codes:")).unwrap_or_else(|| panic!("h2load:\n{text}"));
    assert_eq!(Some(codes), commands[2].1.first().map(String::as_str), "h2load:\n{text}");

    // WebSockets over TLS and HTTP/1.1 on `/ws/*`: five held open, each echoing through the
    // gateway and the https upstream; the sixth while they live is 429; once one closes, one
    // more is taken up.
    let port = gw.port.to_string();
    let out = run("python3", &[WSS, "hold", &port, &edge_ca.0, &host, "/ws/chat", "5"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wss.py hold:\n{said}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 5 * 3 + 3, "{said}");
    for (i, socket) in lines.chunks(3).take(5).enumerate() {
        let n = i + 1;
        assert_eq!(socket[0], format!("open {n} HTTP/1.1 101 Switching Protocols"), "{said}");
        assert_eq!(socket[2], format!("echoed {n} 3"), "{said}");
        // The upstream's first message: what it was told, over TLS.
        let greeting = socket[1].strip_prefix(&format!("greeting {n} ")).unwrap_or_else(|| panic!("{said}"));
        let greeting: serde_json::Value = serde_json::from_str(greeting).unwrap();
        assert!(greeting["tls"].as_str().is_some_and(|v| v.starts_with("TLSv1.")), "{greeting}");
        assert_eq!(greeting["sni"], "localhost", "{greeting}");
        assert_eq!(greeting["path"], format!("/ws/chat-{n}"), "{greeting}");
        assert_eq!(greeting["host"], format!("{host}:{port}"), "{greeting}");
    }
    assert!(lines[15].starts_with("extra HTTP/1.1 429 "), "the sixth socket: {said}");
    assert_eq!(lines[16..], ["closed 1", "after HTTP/1.1 101 Switching Protocols"], "{said}");
}
