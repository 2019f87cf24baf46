//! The status page in a real browser: headless Chromium loads the admin listener's `/` after a
//! known request sequence, runs its script (which polls `status.json` under the page's
//! Content-Security-Policy), and the rendered DOM shows the expected counts, the denied key,
//! the store, the upstream and the configuration. A screenshot is saved in the test's temporary directory
//! (and copied to `$SLUICE_STATUS_PNG` when that is set, for the documentation).
//!
//! Chromium is Debian's `chromium` package.

mod browser;
mod common;
mod ops_support;

use std::sync::Arc;

use common::{Client, T0};
use ops_support::{STATUS_CONFIG, gateway_on, memory_store};
use sluice_core::ManualClock;
use sluice_gateway::observe::{Observer, ThreadRandom};

/// The markup of the first `<tr>` whose opening tag holds every one of `attrs`.
fn row<'a>(dom: &'a str, attrs: &[&str]) -> &'a str {
    let mut rest = dom;
    while let Some(i) = rest.find("<tr") {
        let tail = &rest[i..];
        let end = tail.find("</tr>").map_or(tail.len(), |e| e + 5);
        let tag_end = tail.find('>').unwrap_or(0);
        if attrs.iter().all(|a| tail[..tag_end].contains(a)) {
            return &tail[..end];
        }
        rest = &tail[end..];
    }
    panic!("no row with {attrs:?} in the rendered page:\n{dom}");
}

/// The text of the cell `data-field="field"` in `markup`.
fn field<'a>(markup: &'a str, field: &str) -> &'a str {
    let tag = format!("data-field=\"{field}\">");
    let start = markup.find(&tag).unwrap_or_else(|| panic!("no {field} in {markup}")) + tag.len();
    let len = markup[start..].find('<').unwrap_or(0);
    &markup[start..start + len]
}

#[tokio::test(flavor = "current_thread")]
async fn a_browser_renders_the_live_counts_the_denied_key_the_store_and_the_configuration() {
    browser::require_chromium();
    let clock = Arc::new(ManualClock::new(T0));
    let store = memory_store(STATUS_CONFIG, &clock);
    let observer = Arc::new(Observer::with_sources(clock.clone(), Arc::new(ThreadRandom)));
    // Admitted requests go to a real upstream, for the page's upstream row.
    let up = common::upstream().await;
    let config = format!("{STATUS_CONFIG}\n[upstream]\nurl = \"http://{}\"\n", up.addr);
    let (_gw, addr, admin) = gateway_on(&config, Arc::new(store), observer).await;
    let client = Client::new(addr);
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(client.get("/api/hello", &[]).await.status);
    }
    for account in ["a-1", "a-1", "a-2"] {
        seen.push(client.get("/api/search", &[("x-account", account)]).await.status);
    }
    assert_eq!(seen, [200, 200, 200, 429, 429, 200, 200, 200]);
    let status = Client::new(admin).get("/status.json", &[]).await.json();
    let hash = status["top_denied"][0]["key_hash"].as_str().expect("a denied key").to_owned();

    let dir = browser::TempDir::new();
    let url = format!("http://{admin}/");
    let (dom_dir, shot_dir) = (dir.0.clone(), dir.0.clone());
    let dom = tokio::task::spawn_blocking(move || browser::chromium(&dom_dir, &url, &["--dump-dom".into()]));
    let dom = dom.await.expect("chromium ran");

    // The script ran (under the page's policy) and rendered the live state.
    assert!(dom.contains("live, updated"), "the page never loaded status.json:\n{dom}");
    assert!(dom.contains(">gateway<"), "{dom}");
    let hello = row(&dom, &["data-route=\"hello\"", "data-policy=\"per-ip\""]);
    assert_eq!((field(hello, "allowed"), field(hello, "denied"), field(hello, "shadow_denied")), ("3", "2", "0"));
    assert_eq!(field(hello, "allowed_per_second"), "0.0", "no traffic between the polls");
    let watch = row(&dom, &["data-route=\"search\"", "data-policy=\"watch\""]);
    assert_eq!((field(watch, "allowed"), field(watch, "shadow_denied"), field(watch, "denied")), ("1", "2", "0"));
    let account = row(&dom, &["data-route=\"search\"", "data-policy=\"per-account\""]);
    assert_eq!(field(account, "allowed"), "3");
    let denied = row(&dom, &[&format!("data-key=\"{hash}\"")]);
    assert_eq!((field(denied, "policy"), field(denied, "denials")), ("per-ip", "2"));
    assert!(dom.contains("data-field=\"kind\">memory<") && dom.contains("data-field=\"ready\">yes<"), "{dom}");
    assert!(dom.contains("data-field=\"breaker\">none<"), "{dom}");
    let route = row(&dom, &["data-route-name=\"search\""]);
    assert!(route.contains("watch by ip; per-account by header:x-account|ip") && route.contains(">GET<"), "{route}");
    assert!(row(&dom, &["data-policy-name=\"per-account\""]).contains("limit=5, window=15m"), "{dom}");
    // The upstream's row: up, the six admitted requests answered, response times under a bound.
    let target = row(&dom, &["data-upstream=\"default\"", &format!("data-target=\"{}\"", up.addr)]);
    assert_eq!((field(target, "state"), field(target, "responses"), field(target, "failures")), ("up", "6", "0"));
    assert!(field(target, "p99").ends_with(" ms") || field(target, "p99").ends_with(" s"), "{target}");
    assert!(dom.contains(">no reload since start<") && dom.contains("id=\"uptime\">up "), "{dom}");
    assert!(!dom.contains("never shows this secret"), "a secret reached the page");

    let png = shot_dir.join("status.png");
    let flags = vec![format!("--screenshot={}", png.display()), "--window-size=1280,860".into()];
    let shot = tokio::task::spawn_blocking(move || browser::chromium(&shot_dir, &format!("http://{admin}/"), &flags));
    shot.await.expect("chromium ran");
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000, "not a screenshot: {} bytes", bytes.len());
    if let Some(to) = std::env::var_os("SLUICE_STATUS_PNG") {
        std::fs::copy(&png, to).expect("copy the screenshot");
    }
}
