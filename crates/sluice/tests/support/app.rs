//! The application-like upstream (`app_upstream.py` beside this file) as a child process, and
//! requests sent through sluice tagged so a test can tell which of them reached it.

use std::cell::RefCell;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::raw::{Resp, http, request, send};

/// How to get the interpreter the upstream runs on.
const INSTALL: &str = "apt-get install python3 (scripts/test does it when root)";

/// `python3 app_upstream.py` on a free port, killed when dropped.
pub struct App {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl App {
    /// Starts it; bearer tokens verify with `hs256_secret`. Fails the test, saying how to
    /// install it, when `python3` cannot be run.
    pub fn start(hs256_secret: &str) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/app_upstream.py");
        let mut child = Command::new("python3")
            .arg("-u")
            .arg(&script)
            .args(["--hs256-secret", hs256_secret])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("`python3` is needed by this test and could not be run ({e}); install it: {INSTALL}")
            });
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("its stdout")).read_line(&mut line);
        let addr = line.strip_prefix("app listening on ").and_then(|a| a.trim().parse::<SocketAddr>().ok());
        let Some(addr) = addr else {
            let _ = child.kill();
            panic!("unexpected first line from {}: {line:?}", script.display());
        };
        Self { child, addr }
    }

    /// What it saw so far (`GET /__counts`, straight to it).
    pub fn counts(&self) -> Value {
        http(self.addr, "GET", "/__counts", b"").json()
    }

    /// How many times it acted on `account` at `endpoint` (`password-reset`, `data`, `profile`,
    /// `items`). Accounts are as it folds them: `victim@example.com`, an API key, a token's `sub`.
    pub fn acts(&self, endpoint: &str, account: &str) -> u64 {
        self.counts()["acts"][endpoint][account].as_u64().unwrap_or(0)
    }

    /// Every forwarding or user header it received, in whatever spelling: `(name, value)`.
    pub fn identity_headers(&self) -> Vec<(String, String)> {
        let counts = self.counts();
        let pairs = counts["identity"].as_array().cloned().unwrap_or_default();
        pairs.iter().map(|p| (p[0].as_str().unwrap_or("").to_owned(), p[1].as_str().unwrap_or("").to_owned())).collect()
    }

    /// The `X-Trial` numbers of the requests that reached it, sorted.
    fn seen(&self) -> Vec<u64> {
        let mut seen: Vec<u64> =
            self.counts()["seen"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
        seen.sort_unstable();
        seen
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests sent through sluice, each on its own connection with `X-Trial: N`, and which of
/// them the application answered (its answers carry `X-App-Request: N`; sluice's own don't).
pub struct Trials {
    gateway: SocketAddr,
    /// `(trial, status, answered by the application)`, in the order sent.
    log: RefCell<Vec<(u64, u16, bool)>>,
}

impl Trials {
    /// Requests to the gateway at `gateway`.
    pub fn new(gateway: SocketAddr) -> Self {
        Self { gateway, log: RefCell::new(Vec::new()) }
    }

    /// Sends `method target` with `headers` (raw lines, in order, bytes as given) and `body`.
    pub fn send(&self, method: &str, target: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Resp {
        let trial = self.log.borrow().len() as u64 + 1;
        let tag = trial.to_string();
        let mut lines: Vec<(&str, &[u8])> = vec![("X-Trial", tag.as_bytes())];
        lines.extend_from_slice(headers);
        let resp = send(self.gateway, &request(method, target, &lines, body));
        let by_app = resp.header("x-app-request") == Some(tag.as_str());
        self.log.borrow_mut().push((trial, resp.status, by_app));
        resp
    }

    /// A POST of `body` with `Content-Type: content_type`.
    pub fn post(&self, target: &str, content_type: &str, body: &str) -> Resp {
        self.send("POST", target, &[("Content-Type", content_type.as_bytes())], body.as_bytes())
    }

    /// Fails unless exactly the requests the application answered reached it: none that
    /// sluice refused or denied.
    #[track_caller]
    pub fn assert_refused_never_reached(&self, app: &App) {
        let log = self.log.borrow();
        let answered: Vec<u64> = log.iter().filter(|(_, _, by_app)| *by_app).map(|(t, _, _)| *t).collect();
        let refused: Vec<(u64, u16)> = log.iter().filter(|(_, _, by_app)| !by_app).map(|(t, s, _)| (*t, *s)).collect();
        assert_eq!(
            app.seen(),
            answered,
            "what reached the application is what it answered; sluice answered (trial, status) {refused:?} itself"
        );
    }
}
