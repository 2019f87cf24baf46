//! `sluice serve --config` with two limits on one route — a sliding window of 3 per window and a
//! token bucket of 5 refilled at one token every 2 s — and all three header styles, under real
//! time: requests until denied, each response's `RateLimit-Policy` and `RateLimit` parsed by
//! `sfv` as a client reads them (draft-ietf-httpapi-ratelimit-headers-10).
//!
//! Real time means no exact `t`: each is checked against bounds computed from the wall clock
//! around the request (the server's clock reads Unix time), with 50 ms of room for the two
//! processes' clocks; `r` is exact. A run is valid only if it stays inside one window and within
//! 2 s (so no token comes back mid-run); otherwise it is run again under a new client key (the
//! limits key on `x-client`), which a loaded machine may need, never a normal one.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};
use support::{Serve, TempDir};

/// Room for the difference between this process's clock and the server's, in seconds.
const SKEW: f64 = 0.05;

/// The window of `per-client`, in whole seconds: a minute, unless the current minute ends in
/// under 30 s; then the first longer window that leaves 30 s (windows are aligned to Unix time).
fn window_with_room() -> u64 {
    let now = unix_now();
    (60..).find(|w| *w as f64 - now % *w as f64 >= 30.0).expect("a window with room")
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn config(window: u64) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
headers = ["ietf", "draft-6", "x-ratelimit"]

[[policy]]
name = "per-client"
algorithm = "sliding-window"
limit = 3
window = "{window}s"

[[policy]]
name = "burst"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 0.5

[[route]]
path = "/api"
limits = [{{ policy = "per-client", key = "header:x-client" }}, {{ policy = "burst", key = "header:x-client" }}]
"#
    )
}

/// `(name, [(parameter, value)])` of each member of a structured-field List header. Panics on
/// anything but String items with Integer parameters, as the draft requires.
fn list(headers: &HeaderMap, field: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let lines: Vec<_> = headers.get_all(field).iter().collect();
    assert_eq!(lines.len(), 1, "{field}: one field line in {headers:?}");
    let parsed: List = Parser::new(lines[0].as_bytes()).parse().unwrap_or_else(|e| panic!("{field}: {e}"));
    let member = |entry: &ListEntry| {
        let ListEntry::Item(item) = entry else { panic!("{field}: an inner list") };
        let name = item.bare_item.as_string().unwrap_or_else(|| panic!("{field}: not a String")).as_str().to_owned();
        let param = |(k, v): (&sfv::Key, &BareItem)| {
            let n = v.as_integer().unwrap_or_else(|| panic!("{field}: {} is not an Integer", k.as_str()));
            (k.as_str().to_owned(), u64::try_from(i64::from(n)).expect("non-negative"))
        };
        (name, item.params.iter().map(param).collect())
    };
    parsed.iter().map(member).collect()
}

/// One response and when it was asked and answered (Unix seconds, this process's clock).
struct Exchange {
    status: u16,
    headers: HeaderMap,
    body: serde_json::Value,
    sent: f64,
    received: f64,
}

impl Exchange {
    fn num(&self, name: &str) -> u64 {
        let v = self.headers.get(name).unwrap_or_else(|| panic!("no {name} in {:?}", self.headers));
        v.to_str().unwrap().parse().unwrap_or_else(|_| panic!("{name}: {v:?}"))
    }

    /// The `t` a reset at Unix time `at` can show on this response: from when it was answered to
    /// when it was asked, rounded up as the server rounds.
    fn t_bounds(&self, at: f64) -> (u64, u64) {
        ((at - self.received - SKEW).ceil().max(0.0) as u64, (at - self.sent + SKEW).ceil() as u64)
    }
}

async fn send(http: &reqwest::Client, url: &str, client: &str) -> Exchange {
    let sent = unix_now();
    let res = http.get(url).header("x-client", client).send().await.expect("a response from sluice serve");
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    let body = res.json().await.expect("a JSON body");
    Exchange { status, headers, body, sent, received: unix_now() }
}

fn within(what: &str, value: u64, (lo, hi): (u64, u64)) {
    assert!(lo <= value && value <= hi, "{what}: {value} not within [{lo}, {hi}]");
}

#[tokio::test]
async fn a_two_limit_route_lists_both_and_times_its_denial_by_the_window() {
    let window = window_with_room();
    let dir = TempDir::new("ratelimit-fields");
    let server = Serve::gateway(&dir.write("sluice.toml", &config(window)));
    let url = server.url("/api");
    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20)).build().unwrap();
    let w = window as f64;

    for attempt in 0..5 {
        let client = format!("client-{attempt}");
        let mut run = Vec::new();
        for _ in 0..4 {
            run.push(send(&http, &url, &client).await);
        }
        let (first, last) = (run[0].sent - SKEW, run[3].received + SKEW);
        if (first / w).floor() != (last / w).floor() || last - first >= 2.0 {
            eprintln!(
                "run {attempt} crossed a window boundary or took {:.1} s: again, as another client",
                last - first
            );
            continue;
        }
        // The window's count weighs until the end of the next window; once spent, the window
        // admits again as soon as the next one starts (its count then weighs 3 × (1 - ε) < 3).
        let start = (first / w).floor() * w;
        let (window_reset, window_retry) = (start + 2.0 * w, start + w);
        let policies = vec![
            ("per-client".to_string(), vec![("q".to_string(), 3), ("w".to_string(), window)]),
            ("burst".to_string(), vec![("q".to_string(), 5), ("w".to_string(), 10)]),
        ];
        for (k, ex) in run.iter().enumerate() {
            let step = format!("request {}", k + 1);
            let denied = k == 3;
            assert_eq!(ex.status, if denied { 429 } else { 200 }, "{step}: {:?}", ex.body);
            assert_eq!(list(&ex.headers, "ratelimit-policy"), policies, "{step}");
            let limits = list(&ex.headers, "ratelimit");
            let names: Vec<&str> = limits.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["per-client", "burst"], "{step}");
            let param = |i: usize, p: &str| limits[i].1.iter().find(|(k, _)| k == p).map(|(_, v)| *v).unwrap();
            let keys = |i: usize| limits[i].1.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>();
            assert_eq!((keys(0), keys(1)), (vec!["r", "t"], vec!["r", "t"]), "{step}");

            // The window: 2, 1, 0 left, then denied with nothing left.
            assert_eq!(param(0, "r"), 2u64.saturating_sub(k as u64), "{step}");
            let t_window = param(0, "t");
            within(
                &format!("{step}: per-client t"),
                t_window,
                ex.t_bounds(if denied { window_retry } else { window_reset }),
            );
            // The bucket: a token for each request (the denied one shown as peeked, as if
            // charged); whole again 2 s a token after the first request.
            assert_eq!(param(1, "r"), 4 - k as u64, "{step}");
            // Both ends are read on the server's one clock: only the time between them, at most
            // this exchange's end less the first one's start, is uncertain.
            let bucket_full = 2 * (k as u64 + 1);
            let lo = (bucket_full as f64 - (ex.received - run[0].sent) - SKEW).ceil() as u64;
            within(&format!("{step}: burst t"), param(1, "t"), (lo, bucket_full));

            // draft-6 and x-ratelimit: the window alone, the limit closest to denying.
            assert_eq!((ex.num("ratelimit-limit"), ex.num("ratelimit-remaining")), (3, param(0, "r")), "{step}");
            let reset = ex.num("ratelimit-reset");
            within(&format!("{step}: RateLimit-Reset"), reset, ex.t_bounds(window_reset));
            let x_reset = ex.num("x-ratelimit-reset");
            let unix = ((ex.sent - SKEW) as u64, (ex.received + SKEW) as u64);
            within(&format!("{step}: X-RateLimit-Reset"), x_reset, (unix.0 + reset, unix.1 + reset));
            if denied {
                // Retry-After is the denying window's `t`: not a moment earlier, not later.
                assert_eq!(ex.num("retry-after"), t_window, "{step}");
                assert_eq!(ex.body["retry_after_seconds"], t_window, "{step}");
            } else {
                assert!(ex.headers.get("retry-after").is_none(), "{step}");
            }
        }
        for ex in &run {
            eprintln!(
                "HTTP {}\nRateLimit-Policy: {}\nRateLimit: {}\nRetry-After: {}\n",
                ex.status,
                ex.headers["ratelimit-policy"].to_str().unwrap(),
                ex.headers["ratelimit"].to_str().unwrap(),
                ex.headers.get("retry-after").map_or("-", |v| v.to_str().unwrap()),
            );
        }
        return;
    }
    panic!("five runs in a row crossed a window boundary or took 2 s or more");
}
