//! How a line is written: nginx's `combined` with sluice's fields appended, or JSON with
//! nginx's variable names — the two formats `sluice simulate --access-log` reads (`--log-format
//! combined --xff-last-field`, or `--log-format json` with its default fields).
//!
//! Combined: `PEER - - [TIME] "METHOD TARGET VERSION" STATUS BYTES "REFERER" "USER-AGENT"
//! "X-FORWARDED-FOR" rid=ID client=CLIENT route=ROUTE ratelimit=OUTCOME policy=POLICY
//! upstream=HOST:PORT urt=SECONDS rt=SECONDS`; a quoted field escapes `"`, `\` and bytes outside
//! printable ASCII as `\xHH` (as nginx does), a `key=value` token writes a space or a byte
//! outside printable ASCII as `%HH`, and `-` stands for nothing.
//!
//! JSON: `time` (RFC 3339, milliseconds, UTC), `request_id`, `remote_addr`,
//! `http_x_forwarded_for`, `client`, `request_method`, `request_uri`, `server_protocol`,
//! `status`, `body_bytes_sent`, `request_time` (seconds), `http_referer`, `http_user_agent`,
//! `route`, `ratelimit`, `ratelimit_policy`, `upstream_addr`, `upstream_response_time`
//! (seconds); a field with nothing to say is `null`. With `client = "hash"` there is no
//! address: `remote_addr` and `client` hold the hash, `http_x_forwarded_for` is `null`.

use std::io::Write;

use http::HeaderValue;
use serde_json::{Value, json};

use super::{Entry, LoggedClient};

/// `entry` as a combined line (no newline).
pub fn combined(entry: &Entry, out: &mut Vec<u8>) {
    let time = jiff::Timestamp::try_from(entry.time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let (peer, forwarded, client) = match &entry.client {
        LoggedClient::Address { peer, forwarded_for, client } => {
            (peer.to_string(), forwarded_for.as_ref().map(HeaderValue::as_bytes), client.to_string())
        }
        LoggedClient::Hash(h) => (h.clone(), None, h.clone()),
    };
    let _ = write!(out, "{peer} - - [{}] \"", time.strftime("%d/%b/%Y:%H:%M:%S +0000"));
    escaped(format!("{} {} {:?}", entry.method, entry.target, entry.version).as_bytes(), out);
    let _ = write!(out, "\" {} {} ", entry.status, entry.bytes);
    for field in [
        entry.referer.as_ref().map(HeaderValue::as_bytes),
        entry.user_agent.as_ref().map(HeaderValue::as_bytes),
        forwarded,
    ] {
        out.push(b'"');
        escaped(field.unwrap_or(b"-"), out);
        out.extend_from_slice(b"\" ");
    }
    out.pop();
    let (upstream, latency) = match &entry.upstream {
        Some((at, took)) => (at.as_str(), format!("{:.3}", took.as_secs_f64())),
        None => ("-", "-".to_string()),
    };
    let tokens = [
        ("rid", entry.request_id.as_str()),
        ("client", &client),
        ("route", entry.route.as_deref().unwrap_or("-")),
        ("ratelimit", entry.outcome.as_str()),
        ("policy", entry.policy.as_deref().unwrap_or("-")),
        ("upstream", upstream),
        ("urt", &latency),
    ];
    for (name, value) in tokens {
        let _ = write!(out, " {name}=");
        token(value.as_bytes(), out);
    }
    let _ = write!(out, " rt={:.3}", entry.duration.as_secs_f64());
}

/// `entry` as a JSON object (no newline).
pub fn json(entry: &Entry, out: &mut Vec<u8>) {
    let time = jiff::Timestamp::try_from(entry.time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let text = |v: &Option<HeaderValue>| v.as_ref().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let (peer, forwarded, client) = match &entry.client {
        LoggedClient::Address { peer, forwarded_for, client } => {
            (peer.to_string(), text(forwarded_for), client.to_string())
        }
        LoggedClient::Hash(h) => (h.clone(), None, h.clone()),
    };
    let line = json!({
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        "request_id": entry.request_id.as_str(),
        "remote_addr": peer,
        "http_x_forwarded_for": forwarded,
        "client": client,
        "request_method": entry.method.as_str(),
        "request_uri": entry.target,
        "server_protocol": format!("{:?}", entry.version),
        "status": entry.status,
        "body_bytes_sent": entry.bytes,
        "request_time": seconds(entry.duration),
        "http_referer": text(&entry.referer),
        "http_user_agent": text(&entry.user_agent),
        "route": entry.route,
        "ratelimit": entry.outcome.as_str(),
        "ratelimit_policy": entry.policy,
        "upstream_addr": entry.upstream.as_ref().map(|(at, _)| at.as_str()),
        "upstream_response_time": entry.upstream.as_ref().map_or(Value::Null, |(_, took)| seconds(*took)),
    });
    let _ = serde_json::to_writer(out, &line);
}

/// Seconds with milliseconds, as a JSON number.
fn seconds(d: std::time::Duration) -> Value {
    json!((d.as_millis() as f64) / 1000.0)
}

/// `bytes` inside a quoted field: `"`, `\` and bytes outside printable ASCII as `\xHH`.
fn escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

/// `bytes` as a bare `key=value` value: a space, `%`, `"` or a byte outside printable ASCII
/// as `%HH`, so the token ends at the next space and never opens a quoted field.
fn token(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        if b == b' ' || b == b'%' || b == b'"' || !(0x21..0x7f).contains(&b) {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, SystemTime};

    use http::HeaderValue;
    use proptest::prelude::*;

    use super::*;
    use crate::access_log::Outcome;
    use crate::request_id::RequestId;

    fn entry(target: String, ua: Option<HeaderValue>, xff: Option<HeaderValue>, route: String) -> Entry {
        Entry {
            time: SystemTime::now(),
            started: Instant::now(),
            request_id: RequestId::new(),
            client: LoggedClient::Address {
                peer: [127, 0, 0, 1].into(),
                forwarded_for: xff,
                client: [10, 0, 0, 1].into(),
            },
            method: http::Method::GET,
            target,
            version: http::Version::HTTP_11,
            referer: None,
            user_agent: ua,
            route: Some(route),
            outcome: Outcome::Denied,
            policy: None,
            upstream: None,
            status: 429,
            bytes: 10,
            duration: Duration::from_millis(3),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2_000)))]

        /// Whatever a client puts in the fields it controls (target, User-Agent,
        /// X-Forwarded-For; a route name from the file), a combined line is one line with
        /// exactly its eight field quotes and its fixed tokens after them, and a JSON line is
        /// one JSON object: no field can forge another field or another line.
        #[test]
        fn client_bytes_never_break_a_line(
            target in "[ -~]{0,40}",
            ua in proptest::collection::vec(any::<u8>(), 0..40),
            xff in proptest::collection::vec(any::<u8>(), 0..40),
            route in "[ -~]{0,12}",
        ) {
            let value = |b: &[u8]| HeaderValue::from_bytes(b).ok();
            let e = entry(target.clone(), value(&ua), value(&xff), route);
            let mut line = Vec::new();
            combined(&e, &mut line);
            prop_assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
            prop_assert_eq!(line.iter().filter(|&&b| b == b'"').count(), 8, "{}", String::from_utf8_lossy(&line));
            let tail = String::from_utf8_lossy(&line[line.iter().rposition(|&b| b == b'"').unwrap() + 1..]).into_owned();
            let keys: Vec<&str> = tail.split(' ').filter(|t| !t.is_empty()).map(|t| t.split('=').next().unwrap()).collect();
            prop_assert_eq!(keys, ["rid", "client", "route", "ratelimit", "policy", "upstream", "urt", "rt"]);
            let mut json_line = Vec::new();
            json(&e, &mut json_line);
            prop_assert!(!json_line.contains(&b'\n'));
            let v: serde_json::Value = serde_json::from_slice(&json_line).unwrap();
            prop_assert_eq!(v["request_uri"].as_str(), Some(target.as_str()));
        }
    }
}
