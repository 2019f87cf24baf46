//! CORS in a real browser: a page served from one origin `fetch`es sluice on another (headless
//! Chromium). From an allowed origin the page reads the 429's `Retry-After` and
//! `RateLimit-Policy`; a request with a custom header goes through a preflight that sluice
//! answers and does not charge; from another origin the browser keeps every answer from the
//! page.

mod browser;
mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::Mutex;

use common::start;

/// A page that fetches `url` (with `header`, when given) twice and writes what it could read:
/// `STATUS RETRY-AFTER RATELIMIT-POLICY` per fetch, or `blocked`, joined by `|`.
fn page(url: &str, header: Option<(&str, &str)>) -> String {
    let init = header.map_or("{}".to_string(), |(k, v)| format!("{{ headers: {{ '{k}': '{v}' }} }}"));
    format!(
        r#"<!doctype html><html><body><pre id="out">pending</pre><script>
(async () => {{
  const seen = [];
  for (let i = 0; i < 2; i++) {{
    try {{
      const r = await fetch("{url}", {init});
      seen.push(r.status + " " + r.headers.get("Retry-After") + " " + r.headers.get("RateLimit-Policy"));
    }} catch (e) {{ seen.push("blocked"); }}
  }}
  document.getElementById("out").textContent = seen.join("|");
}})();
</script></body></html>"#
    )
}

/// A server of one page at `/`, on a port of its own (the page's origin); the page is set
/// once the gateway it fetches from listens.
async fn page_server() -> (SocketAddr, Arc<Mutex<String>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let html = Arc::new(Mutex::new(String::new()));
    let served = html.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let served = served.clone();
            async move { axum::response::Html(served.lock().await.clone()) }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, html)
}

/// What the page loaded from `page_url` wrote, once its fetches are done.
async fn rendered(page_url: String) -> String {
    let dir = browser::TempDir::new();
    let path = dir.0.clone();
    let dom = tokio::task::spawn_blocking(move || browser::chromium(&path, &page_url, &["--dump-dom".into()]));
    let dom = dom.await.expect("chromium ran");
    let start = dom.find("<pre id=\"out\">").unwrap_or_else(|| panic!("no output in {dom}")) + 14;
    dom[start..start + dom[start..].find('<').unwrap()].to_string()
}

fn config(origin: &str) -> String {
    format!(
        r#"[server]
headers = ["ietf"]

[server.cors]
allow_origins = ["{origin}"]
preflight = "answer"

[[policy]]
name = "one-an-hour"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api/*"
limits = [{{ policy = "one-an-hour", key = "ip" }}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_an_allowed_origin_reads_retry_after_and_another_cannot() {
    browser::require_chromium();
    let (page_addr, served) = page_server().await;
    let (gw, _) = start(&config(&format!("http://127.0.0.1:{}", page_addr.port()))).await;
    let api = format!("http://127.0.0.1:{}/api/items", gw.addr.port());

    // From the allowed origin: the first fetch is admitted, the second denied, and the page
    // reads the denial's Retry-After and policy.
    *served.lock().await = page(&api, None);
    let seen = rendered(format!("http://127.0.0.1:{}/", page_addr.port())).await;
    let fetches: Vec<&str> = seen.split('|').collect();
    assert_eq!(fetches.len(), 2, "{seen}");
    assert!(fetches[0].starts_with("200 null "), "{seen}");
    let denied: Vec<&str> = fetches[1].split(' ').collect();
    assert_eq!(denied[0], "429", "{seen}");
    let retry: u64 = denied[1].parse().unwrap_or_else(|_| panic!("the page could not read Retry-After: {seen}"));
    assert!((1..=3600).contains(&retry), "{seen}");
    assert!(denied[2].contains("one-an-hour"), "the page reads RateLimit-Policy: {seen}");

    // The same page from another origin (localhost is not 127.0.0.1 to a browser): blocked.
    let seen = rendered(format!("http://localhost:{}/", page_addr.port())).await;
    assert_eq!(seen, "blocked|blocked", "a page on another origin read sluice's answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflighted_fetch_is_answered_and_not_charged() {
    browser::require_chromium();
    let (page_addr, served) = page_server().await;
    let (gw, _) = start(&config(&format!("http://127.0.0.1:{}", page_addr.port()))).await;
    // A custom header makes each fetch a preflight and the request: two preflights, then one
    // admitted request and one denied — the preflights took nothing of the limit of one.
    *served.lock().await = page(&format!("http://127.0.0.1:{}/api/items", gw.addr.port()), Some(("X-Api-Key", "k")));
    let seen = rendered(format!("http://127.0.0.1:{}/", page_addr.port())).await;
    let fetches: Vec<&str> = seen.split('|').collect();
    assert!(fetches.len() == 2 && fetches[0].starts_with("200 ") && fetches[1].starts_with("429 "), "{seen}");
}
