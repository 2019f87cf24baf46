//! Calendar quotas through the binary: a monthly quota in Kyiv's time and a daily one in New
//! York's, as fixed windows and as sliding windows, on the memory store and on Redis. The
//! Retry-After of a denial is the time to the zone's next month or day, as jiff (read
//! independently here) computes it from the real clock: a sliding window's spent month weighs
//! fully at the start of the next, and its weight falls below the limit one nanosecond later.

mod support;

#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;

use std::net::SocketAddr;

use jiff::{Timestamp, tz::TimeZone};
use support::raw::{Resp, request, send};
use support::{Serve, TempDir};

const LIMITS: &str = r#"
[[policy]]
name = "monthly"
algorithm = "fixed-window"
limit = 2
window = "1mo"
align = "calendar"
timezone = "Europe/Kyiv"

[[policy]]
name = "daily"
algorithm = "fixed-window"
limit = 3
window = "1d"
align = "calendar"
timezone = "America/New_York"

[[route]]
path = "/v1/*"
limits = [
  { policy = "monthly", key = "header:x-tenant" },
  { policy = "daily", key = "header:x-user" },
]
"#;

fn config(server: &str, store: &str) -> String {
    format!("[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n{server}\n{LIMITS}{store}")
}

/// [`config`] with both quotas counted by sliding windows.
fn sliding(server: &str, store: &str) -> String {
    config(server, store).replace("algorithm = \"fixed-window\"", "algorithm = \"sliding-window\"")
}

/// Seconds from `at` to the start of the next month (or day) in `zone`, by jiff.
fn to_next(zone: &str, month: bool, at: Timestamp) -> i64 {
    let tz = TimeZone::get(zone).unwrap();
    let date = at.to_zoned_datetime(tz.clone()).date();
    let next = if month { date.last_of_month().tomorrow().unwrap() } else { date.tomorrow().unwrap() };
    let start = next.to_zoned_datetime(tz).unwrap().start_of_day().unwrap().timestamp();
    start.as_second() - at.as_second()
}

/// Whole seconds of Retry-After, which rounds up.
fn retry_after(r: &Resp) -> i64 {
    r.header("retry-after").expect("a denial says when to retry").parse().unwrap()
}

fn quotas_follow_the_calendar(gateway: SocketAddr) {
    let get = |tenant: &str, user: &str| {
        send(gateway, &request("GET", "/v1/chat", &[("x-tenant", tenant.as_bytes()), ("x-user", user.as_bytes())], b""))
    };
    assert_eq!(get("acme", "ann").status, 200);
    assert_eq!(get("acme", "bob").status, 200);
    let before = Timestamp::now();
    let denied = get("acme", "cy");
    let after = Timestamp::now();
    assert_eq!(denied.status, 429, "the tenant's month is spent: {}", denied.text());
    let (earliest, latest) = (to_next("Europe/Kyiv", true, after), to_next("Europe/Kyiv", true, before) + 1);
    let waited = retry_after(&denied);
    assert!(
        (earliest..=latest).contains(&waited),
        "Retry-After {waited} s, the next month in Kyiv begins in {earliest}..={latest} s"
    );

    // The user's day in New York: three requests (another tenant each), then the day's end.
    for tenant in ["t1", "t2", "t3"] {
        assert_eq!(get(tenant, "dee").status, 200);
    }
    let before = Timestamp::now();
    let denied = get("t4", "dee");
    let after = Timestamp::now();
    assert_eq!(denied.status, 429);
    let waited = retry_after(&denied);
    let (earliest, latest) =
        (to_next("America/New_York", false, after), to_next("America/New_York", false, before) + 1);
    assert!(
        (earliest..=latest).contains(&waited),
        "Retry-After {waited} s, New York's next day in {earliest}..={latest} s"
    );
    assert!(waited <= 25 * 3_600, "a day is at most 25 hours");
}

#[test]
fn monthly_and_daily_quotas_reset_at_the_zones_midnight() {
    let dir = TempDir::new("calendar-quota");
    let gw = Serve::gateway(&dir.write("gateway.toml", &config("", "")));
    quotas_follow_the_calendar(([127, 0, 0, 1], gw.port).into());
}

#[test]
fn sliding_windows_follow_the_calendar_too() {
    let dir = TempDir::new("calendar-quota-sliding");
    let gw = Serve::gateway(&dir.write("gateway.toml", &sliding("", "")));
    quotas_follow_the_calendar(([127, 0, 0, 1], gw.port).into());
}

#[cfg(feature = "external-programs")]
#[test]
fn on_redis_too() {
    let redis = redis_support::RedisServer::start();
    let dir = TempDir::new("calendar-quota-redis");
    for config in [config, sliding] {
        let config = config(support::SHARED_SECRET, &support::redis_store(&redis.url()));
        let gw = Serve::gateway(&dir.write("gateway.toml", &config));
        // Each algorithm's keys are its own (the fingerprint names it): no state is shared.
        quotas_follow_the_calendar(([127, 0, 0, 1], gw.port).into());
    }
}

#[test]
fn check_config_names_what_is_wrong_with_a_calendar_window() {
    let dir = TempDir::new("calendar-quota-bad");
    let cases = [
        ("timezone = \"Europe/Kyiv\"", "timezone = \"Europe/Atlantis\"", "policy[0].timezone", "Europe/Atlantis"),
        (
            "window = \"1mo\"",
            "window = \"30d\"",
            "policy[0].window",
            "a calendar window is one of `1d`, `1w`, `1mo`, `1y`",
        ),
        ("align = \"calendar\"\ntimezone = \"Europe/Kyiv\"", "", "policy[0].window", "add `align = \"calendar\"`"),
        ("align = \"calendar\"\n", "align = \"monthly\"\n", "policy[0].align", "`monthly` is not one of"),
        ("align = \"calendar\"\n", "", "policy[0].timezone", "applies only to `align = \"calendar\"`"),
    ];
    for (from, to, field, says) in cases {
        let bad = config("", "").replacen(from, to, 1);
        let path = dir.write("gateway.toml", &bad);
        let err = support::refused_config(&path);
        assert!(err.contains("gateway.toml") && err.contains(field) && err.contains(says), "{from} -> {to}: {err}");
    }
    let log = config("", "").replacen("algorithm = \"fixed-window\"", "algorithm = \"sliding-log\"", 1);
    let err = support::refused_config(&dir.write("gateway.toml", &log));
    assert!(err.contains("policy[0].align") && err.contains("a sliding log counts the `window` before"), "{err}");
    let log_month = log.replacen("align = \"calendar\"\ntimezone = \"Europe/Kyiv\"\n", "", 1);
    let err = support::refused_config(&dir.write("gateway.toml", &log_month));
    assert!(err.contains("policy[0].window") && err.contains("use `sliding-window`"), "{err}");
}
