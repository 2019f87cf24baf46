//! The rate-limit headers a client can follow, in the styles clients expect.
//!
//! # `ietf`: draft-ietf-httpapi-ratelimit-headers-10
//!
//! Both fields are structured-field Lists (RFC 9651), serialised by the `sfv` crate, with one
//! item per policy that applies to the request, in the route's order:
//!
//! - `RateLimit-Policy: "per-ip";q=3;w=60, "burst";q=5;w=10` — the item is the policy's name (a
//!   String); `q` its quota: the limit of a window algorithm, the capacity of a bucket; `w` its
//!   window in whole seconds (rounded up, at least 1). A bucket's window is the time it takes to
//!   refill its whole capacity, `capacity / rate` ([`quota_window`]), so `q` per `w` is its
//!   sustained rate and `q` its burst. `qu`, what the policy counts, is written only when it is
//!   not requests, the draft's default (`qu="tokens"`, `qu="content-bytes"`: a policy's `unit`).
//! - `RateLimit: "per-ip";r=2;t=75, "burst";r=4;t=2` — `r` the quota left (requests of cost 1)
//!   and `t` the draft's reset: seconds until more quota is made available. For a policy that
//!   denied the request, `t` is its `retry_after` rounded up (at least 1): when this policy admits
//!   the request again, the same number as `Retry-After`, so `Retry-After` never names a time
//!   earlier than the denying policy's `t` (the draft's SHOULD NOT). For a policy that did not
//!   deny, `t` is its `reset_after` rounded up: when its whole quota is back. A decision does not
//!   say when the next unit comes back (for a bucket or a sliding window, sooner), and the draft
//!   lets clients assume only that more quota is available at `t`, which holds; a client that
//!   spends at most `r` before `t` is never denied by that policy for it.
//! - `pk` (the partition key, a Byte Sequence) is written only when the view carries one
//!   ([`LimitView::with_partition_key`]; the pipeline gives the check's keyed 128-bit hash, never
//!   the raw key, when the operator asks for it).
//!
//! Shadow policies are not listed: the draft lists the policies that apply to the request, and a
//! shadow policy never limits it. In a denial nothing is charged; a policy that would have
//! admitted the request is described as the store peeked it, as if it had been charged (the
//! strict direction: `r` one cost lower than the quota left).
//!
//! Names are Strings of printable ASCII: any other character of a policy name is written as
//! `%XX` for each of its UTF-8 bytes (`"`, `\` are escaped as RFC 9651 says).
//!
//! # `draft-6` and `x-ratelimit`
//!
//! These describe one limit, the one that denied or the one closest to denying (the `described`
//! view), as their clients expect one value: `RateLimit-Limit`, `-Remaining`, `-Reset` (its
//! `reset_after`, rounded up) and, when `ietf` is not configured, the draft-6
//! `RateLimit-Policy: 3;w=60`; `X-RateLimit-Limit`, `-Remaining`, `-Reset` (Unix seconds).
//!
//! ```
//! use sluice_config::HeaderStyle;
//! use sluice_core::{Decision, NANOS_PER_SEC, Policy, SlidingWindow, TokenBucket};
//! use sluice_http::headers::{LimitView, write_rate_limit_headers};
//! let per_ip: Policy = SlidingWindow::new(3, 60 * NANOS_PER_SEC).unwrap().into();
//! let burst: Policy = TokenBucket::new(5, 0.5).unwrap().into();
//! let decided = |limit, remaining, reset| Decision {
//!     allowed: true, limit, remaining, reset_after: reset * NANOS_PER_SEC, retry_after: 0, delay: 0,
//! };
//! let views = [
//!     LimitView::new("per-ip", &per_ip, decided(3, 2, 75)),
//!     LimitView::new("burst", &burst, decided(5, 4, 2)),
//! ];
//! let mut h = http::HeaderMap::new();
//! write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf, HeaderStyle::Draft6], &views, 0, 1_700_000_000);
//! assert_eq!(h["ratelimit-policy"], r#""per-ip";q=3;w=60, "burst";q=5;w=10"#);
//! assert_eq!(h["ratelimit"], r#""per-ip";r=2;t=75, "burst";r=4;t=2"#);
//! // draft-6 describes the one closest to denying (index 0).
//! assert_eq!(h["ratelimit-remaining"], "2");
//! ```

use std::borrow::{Borrow, Cow};
use std::cell::RefCell;
use std::fmt::Write as _;

use http::HeaderMap;
use http::header::{CACHE_CONTROL, HeaderName, HeaderValue, RETRY_AFTER};
use sfv::{Integer, KeyRef, ListSerializer, StringRef, key_ref};
use sluice_config::HeaderStyle;
use sluice_core::{Decision, NANOS_PER_SEC, Nanos, Policy, ceil_secs};

/// A limit a response describes: its policy's name and window, the decision, and (when the
/// operator publishes them) the partition key.
#[derive(Debug, Clone, Copy)]
pub struct LimitView<'a> {
    /// Policy name: the item of the `ietf` lists.
    pub name: &'a str,
    /// Window length: the window of a window algorithm, a bucket's time to refill its whole
    /// capacity ([`quota_window`]). Written as `w`, in whole seconds.
    pub window: Nanos,
    /// The decision to describe: `q`, `r` and `t` come from it.
    pub decision: Decision,
    /// The `pk` parameter of both `ietf` items: `None` unless the operator asks for it.
    pub partition_key: Option<&'a [u8]>,
    /// The `qu` parameter of the `RateLimit-Policy` item: what the policy counts, when not
    /// requests (`content-bytes`, `concurrent-requests`, `tokens`...).
    pub unit: Option<&'a str>,
}

impl<'a> LimitView<'a> {
    /// The view of `decision` under the policy `name`, `policy`, with no partition key.
    pub fn new(name: &'a str, policy: &Policy, decision: Decision) -> Self {
        Self { name, window: quota_window(policy), decision, partition_key: None, unit: None }
    }

    /// The view of `decision` under the configured policy `info` (its unit included). A
    /// concurrency limit's slot comes back when any of its requests ends, not when a lease
    /// does: its client is told to retry in a second, at most.
    pub fn of(info: &'a crate::enforce::PolicyInfo, mut decision: Decision) -> Self {
        if info.concurrency {
            decision.retry_after = decision.retry_after.min(NANOS_PER_SEC);
        }
        Self { unit: info.unit.as_deref(), ..Self::new(&info.name, &info.policy, decision) }
    }

    /// The same view, publishing `key` as its partition key (`pk`).
    pub fn with_partition_key(self, key: &'a [u8]) -> Self {
        Self { partition_key: Some(key), ..self }
    }

    /// `w`: the window in whole seconds, rounded up, at least 1 (the draft allows no 0).
    pub fn window_secs(&self) -> u64 {
        ceil_secs(self.window).max(1)
    }

    /// `t`: seconds until more quota is made available. For a denial, when this policy admits the
    /// request again (as `Retry-After`); otherwise when its quota is whole again.
    pub fn reset_secs(&self) -> u64 {
        match self.decision.allowed {
            true => ceil_secs(self.decision.reset_after),
            false => retry_after_secs(&self.decision),
        }
    }
}

/// The window `w` describes for `policy`: the window of the window algorithms; for the token and
/// leaky buckets, the time to refill the whole capacity, `capacity / rate`. The core rounds a
/// bucket's per-token interval up to whole nanoseconds, so `capacity × interval` may exceed the
/// exact refill time by under `capacity` ns: a refill time that little above a whole second is
/// taken as that second, so that 30 tokens at 3 per second state `w=10`, not 11.
///
/// ```
/// use sluice_core::{NANOS_PER_SEC, Policy, TokenBucket};
/// use sluice_http::headers::quota_window;
/// let p: Policy = TokenBucket::new(30, 3.0).unwrap().into();
/// assert_eq!(quota_window(&p), 10 * NANOS_PER_SEC);
/// ```
pub fn quota_window(policy: &Policy) -> Nanos {
    let refill = |capacity: u64, interval: Nanos| {
        let rounded = capacity.saturating_mul(interval);
        let over = rounded % NANOS_PER_SEC;
        if over < capacity { rounded - over } else { rounded }
    };
    match policy {
        Policy::TokenBucket(p) => refill(p.capacity(), p.interval()),
        Policy::LeakyBucket(p) => refill(p.capacity(), p.interval()),
        _ => policy.window(),
    }
}

/// Whole seconds a denied client should wait: `retry_after` rounded up, at least 1.
pub fn retry_after_secs(d: &Decision) -> u64 {
    ceil_secs(d.retry_after).max(1)
}

/// `RateLimit-Limit` (draft-6): the quota of the limit a response describes.
pub static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining` (draft-6): what is left of it.
pub static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

const Q: &KeyRef = key_ref("q");
const W: &KeyRef = key_ref("w");
const R: &KeyRef = key_ref("r");
const T: &KeyRef = key_ref("t");
const PK: &KeyRef = key_ref("pk");
const QU: &KeyRef = key_ref("qu");

/// Writes the rate-limit headers of `views` (every limit that applies to the request, in the
/// route's order) in each of `styles`: `ietf` lists them all; `draft-6` and `x-ratelimit`
/// describe `views[described]`, the limit that denied or the one closest to denying (with both
/// `draft-6` and `ietf`, `RateLimit-Policy` takes the `ietf` form only). `unix_now` (seconds) is
/// used by `x-ratelimit`, whose reset is an absolute time. See the [module](self) for what each
/// value means.
///
/// `views` is any list that can be walked more than once: a slice, or the pipeline's iterator
/// over a request's checks (no list is built per request).
pub fn write_rate_limit_headers<'a, I>(
    out: &mut HeaderMap,
    styles: &[HeaderStyle],
    views: I,
    described: usize,
    unix_now: u64,
) where
    I: IntoIterator + Clone,
    I::Item: Borrow<LimitView<'a>>,
{
    let one = || views.clone().into_iter().nth(described).map(|v| *v.borrow());
    let with_ietf = styles.contains(&HeaderStyle::Ietf);
    for style in styles {
        match style {
            HeaderStyle::Draft6 => {
                let Some(v) = one() else { continue };
                let d = &v.decision;
                out.insert(RATELIMIT_LIMIT.clone(), LIMIT.with(|last| last.number(d.limit)));
                out.insert(RATELIMIT_REMAINING.clone(), number(d.remaining));
                out.insert(RATELIMIT_RESET.clone(), number(ceil_secs(d.reset_after)));
                // Both styles name a `RateLimit-Policy` header, in two syntaxes: with `ietf`
                // also configured, only its (current) form is sent.
                if !with_ietf {
                    let policy = DRAFT6_POLICY.with(|last| {
                        last.value((d.limit, v.window_secs()), || {
                            let mut s = String::with_capacity(24);
                            let mut list = ListSerializer::with_buffer(&mut s);
                            _ = list.bare_item(int(d.limit)).parameter(W, int(v.window_secs()));
                            list.finish().and_then(|s| HeaderValue::try_from(std::mem::take(s)).ok())
                        })
                    });
                    if let Some(policy) = policy {
                        out.insert(RATELIMIT_POLICY.clone(), policy);
                    }
                }
            }
            HeaderStyle::Ietf => write_ietf(out, views.clone()),
            HeaderStyle::XRateLimit => {
                let Some(v) = one() else { continue };
                let d = &v.decision;
                out.insert(X_LIMIT.clone(), LIMIT.with(|last| last.number(d.limit)));
                out.insert(X_REMAINING.clone(), number(d.remaining));
                let reset = unix_now.saturating_add(ceil_secs(d.reset_after));
                out.insert(X_RESET.clone(), X_RESET_AT.with(|last| last.number(reset)));
            }
        }
    }
}

/// The last value a thread wrote for a header that rarely changes from one response to the next
/// (a policy's limit, its draft-6 `RateLimit-Policy`, the absolute reset of a second): kept with
/// what it was made from, and cloned (no allocation, no formatting) while that stays the same.
struct Last<K>(RefCell<Option<(K, Option<HeaderValue>)>>);

impl<K: PartialEq + Copy> Last<K> {
    const fn new() -> Self {
        Self(RefCell::new(None))
    }

    /// The value made from `key`: the last one if it was made from `key` too.
    fn value(&self, key: K, make: impl FnOnce() -> Option<HeaderValue>) -> Option<HeaderValue> {
        let mut last = self.0.borrow_mut();
        match &*last {
            Some((k, v)) if *k == key => v.clone(),
            _ => {
                let v = make();
                *last = Some((key, v.clone()));
                v
            }
        }
    }
}

impl Last<u64> {
    /// [`number`]`(n)`, the last one if it was `n` too.
    fn number(&self, n: u64) -> HeaderValue {
        if n < NUMBERS_KEPT {
            return number(n);
        }
        self.value(n, || Some(number(n))).unwrap_or_else(|| number(n))
    }
}

thread_local! {
    static LIMIT: Last<u64> = const { Last::new() };
    static X_RESET_AT: Last<u64> = const { Last::new() };
    static DRAFT6_POLICY: Last<(u64, u64)> = const { Last::new() };
}

/// `RateLimit-Policy` and `RateLimit` with one item per view: one String for each header.
fn write_ietf<'a, I>(out: &mut HeaderMap, views: I)
where
    I: IntoIterator + Clone,
    I::Item: Borrow<LimitView<'a>>,
{
    // An item is its name and at most 40 more bytes (two integers of up to 15 digits, the
    // parameter names); a partition key is 4/3 of its bytes, plus its colons.
    // A unit is its bytes, quoted, and `;qu=`.
    let room = |v: &LimitView<'_>| {
        v.name.len()
            + 40
            + v.partition_key.map_or(0, |k| k.len().div_ceil(3) * 4 + 6)
            + v.unit.map_or(0, |u| u.len() + 6)
    };
    let cap = views.clone().into_iter().map(|v| room(v.borrow())).sum();
    let (mut policy, mut limits) = (String::with_capacity(cap), String::with_capacity(cap));
    let (mut policy_list, mut limit_list) =
        (ListSerializer::with_buffer(&mut policy), ListSerializer::with_buffer(&mut limits));
    for v in views {
        let v = v.borrow();
        let name = sf_name(v.name);
        let d = &v.decision;
        let mut p = policy_list.bare_item(&*name).parameter(Q, int(d.limit));
        if let Some(unit) = v.unit {
            p = p.parameter(QU, &*sf_name(unit));
        }
        let p = p.parameter(W, int(v.window_secs()));
        let l = limit_list.bare_item(&*name).parameter(R, int(d.remaining)).parameter(T, int(v.reset_secs()));
        if let Some(key) = v.partition_key {
            _ = (p.parameter(PK, key), l.parameter(PK, key));
        }
    }
    insert_list(out, &RATELIMIT_POLICY, policy_list.finish());
    insert_list(out, &RATELIMIT, limit_list.finish());
}

/// Sets `name` to a serialised list (none when the list is empty: RFC 9651 sends no empty list).
fn insert_list(out: &mut HeaderMap, name: &HeaderName, list: Option<&mut String>) {
    // The serialiser writes printable ASCII only: the conversion always succeeds.
    if let Some(Ok(v)) = list.map(|s| HeaderValue::try_from(std::mem::take(s))) {
        out.insert(name.clone(), v);
    }
}

/// A structured-field Integer: values beyond its 15 digits are written as its largest.
fn int(n: u64) -> Integer {
    Integer::try_from(n).unwrap_or(Integer::MAX)
}

/// A policy name as a structured-field String: as it is when it is printable ASCII (no copy),
/// otherwise with each byte of every other character written as `%XX`.
fn sf_name(name: &str) -> Cow<'_, StringRef> {
    if let Ok(s) = StringRef::from_str(name) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(name.len() * 3);
    for c in name.chars() {
        if (' '..='~').contains(&c) {
            out.push(c);
        } else {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                _ = write!(out, "%{b:02X}");
            }
        }
    }
    // Only printable ASCII is left.
    Cow::Owned(sfv::String::from_string(out).unwrap_or_default())
}

/// The request header that tells what a request is passed on to (the upstream, the inner
/// service) which soft limits the request is over: a structured-field List of their names
/// (`"per-tenant", "monthly-tokens"`). sluice removes it from every request it passes on, and
/// sets it only itself: a client cannot claim to be over a limit, or hide that it is.
pub const SOFT_LIMITED: HeaderName = HeaderName::from_static("sluice-soft-limited");

/// Sets [`SOFT_LIMITED`] in `headers` to `names` (none: removes it, whatever the client sent).
///
/// ```
/// use http::HeaderMap;
/// use sluice_http::headers::{SOFT_LIMITED, mark_soft_limited};
/// let mut h = HeaderMap::new();
/// h.insert(SOFT_LIMITED, "\"forged\"".parse().unwrap());
/// mark_soft_limited(&mut h, ["per-tenant", "monthly"]);
/// assert_eq!(h[SOFT_LIMITED], "\"per-tenant\", \"monthly\"");
/// mark_soft_limited(&mut h, []);
/// assert!(h.get(SOFT_LIMITED).is_none());
/// ```
pub fn mark_soft_limited<'a>(headers: &mut HeaderMap, names: impl IntoIterator<Item = &'a str>) {
    headers.remove(SOFT_LIMITED);
    let mut s = String::new();
    let mut list = ListSerializer::with_buffer(&mut s);
    let mut any = false;
    for name in names {
        _ = list.bare_item(&*sf_name(name));
        any = true;
    }
    if let Some(value) = list.finish().filter(|_| any).and_then(|s| HeaderValue::try_from(std::mem::take(s)).ok()) {
        headers.insert(SOFT_LIMITED, value);
    }
}

/// Numbers below this are written from [`number`]'s table.
const NUMBERS_KEPT: u64 = 1024;

/// `n` as a header value. The counts and seconds of rate-limit headers are mostly small: those
/// below 1,024 come ready-made from a table built once (a static value, cloned without an
/// allocation), the others are written as `HeaderValue::from` does (one allocation each, about
/// 300 instructions, on every response).
///
/// ```
/// use sluice_http::headers::number;
/// assert_eq!(number(0), "0");
/// assert_eq!(number(1023), "1023");
/// assert_eq!(number(1024), "1024");
/// assert_eq!(number(u64::MAX), u64::MAX.to_string().as_str());
/// ```
pub fn number(n: u64) -> HeaderValue {
    static KEPT: std::sync::LazyLock<Box<[HeaderValue]>> = std::sync::LazyLock::new(|| {
        (0..NUMBERS_KEPT).map(|n| HeaderValue::from_static(Box::leak(n.to_string().into_boxed_str()))).collect()
    });
    match usize::try_from(n) {
        Ok(i) if n < NUMBERS_KEPT => KEPT[i].clone(),
        _ => {
            // The digits written here and copied once: `HeaderValue::from` formats into a
            // growable buffer and allocates twice.
            let mut buf = [0u8; 20];
            HeaderValue::from_bytes(sluice_core::decimal(n, &mut buf)).unwrap_or_else(|_| HeaderValue::from(n))
        }
    }
}

/// Writes what every denial carries: `Retry-After` (whole seconds, at least 1) and
/// `Cache-Control: no-store` (RFC 6585: a 429 must not be cached).
pub fn write_denial_headers(out: &mut HeaderMap, retry_after_secs: u64) {
    out.insert(RETRY_AFTER, number(retry_after_secs));
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Writes everything a denial carries: the rate-limit headers of `views` (see
/// [`write_rate_limit_headers`]; `described` is the limit that denied, when known),
/// `Retry-After` and `Cache-Control: no-store`. Returns the `Retry-After` seconds: those of the
/// described limit, which are its `t` in the `ietf` `RateLimit`.
pub fn write_denied<'a, I>(
    out: &mut HeaderMap,
    styles: &[HeaderStyle],
    views: I,
    described: Option<usize>,
    unix_now: u64,
) -> u64
where
    I: IntoIterator + Clone,
    I::Item: Borrow<LimitView<'a>>,
{
    let secs = denied_retry_after_secs(views.clone(), described);
    if let Some(i) = described {
        write_rate_limit_headers(out, styles, views, i, unix_now);
    }
    write_denial_headers(out, secs);
    secs
}

/// The `Retry-After` seconds of a denial described by `views[described]`: 1 when unknown.
pub fn denied_retry_after_secs<'a, I>(views: I, described: Option<usize>) -> u64
where
    I: IntoIterator,
    I::Item: Borrow<LimitView<'a>>,
{
    described.and_then(|i| views.into_iter().nth(i)).map_or(1, |v| retry_after_secs(&v.borrow().decision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sfv::{BareItem, List, ListEntry, Parser};
    use sluice_core::{SlidingWindow, TokenBucket};

    fn window(limit: u64, secs: u64) -> Policy {
        SlidingWindow::new(limit, secs * NANOS_PER_SEC).unwrap().into()
    }

    fn decision(allowed: bool, limit: u64, remaining: u64, reset_ns: u64, retry_ns: u64) -> Decision {
        Decision { allowed, limit, remaining, reset_after: reset_ns, retry_after: retry_ns, delay: 0 }
    }

    fn view(remaining: u64, reset_ns: u64) -> LimitView<'static> {
        static P: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(|| window(10, 60));
        LimitView::new("per\"ip", &P, decision(true, 10, remaining, reset_ns, 0))
    }

    /// A header's members parsed back as RFC 9651 Lists: (name, [(parameter, integer or bytes)]).
    fn parsed(h: &HeaderMap, name: &str) -> Vec<(String, Vec<(String, String)>)> {
        let lines: Vec<_> = h.get_all(name).iter().collect();
        assert_eq!(lines.len(), 1, "{name}: one field line");
        let list: List = Parser::new(lines[0].as_bytes()).parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        list.iter()
            .map(|m| {
                let ListEntry::Item(item) = m else { panic!("{name}: an inner list") };
                let name = match &item.bare_item {
                    BareItem::String(s) => s.as_str().to_owned(),
                    BareItem::Integer(i) => i.to_string(),
                    other => panic!("{name}: item {other:?}"),
                };
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            BareItem::Integer(i) => i.to_string(),
                            BareItem::ByteSequence(b) => format!("{b:?}"),
                            other => panic!("{k}: {other:?}"),
                        };
                        (k.as_str().to_owned(), v)
                    })
                    .collect();
                (name, params)
            })
            .collect()
    }

    fn values<'h>(h: &'h HeaderMap, names: &[&str]) -> Vec<&'h str> {
        names.iter().map(|n| h.get(*n).and_then(|v| v.to_str().ok()).unwrap_or("")).collect()
    }

    fn item(name: &str, params: &[(&str, u64)]) -> (String, Vec<(String, String)>) {
        (name.to_owned(), params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn a_policy_that_counts_something_else_says_so_as_qu() {
        let mut h = HeaderMap::new();
        let tokens = LimitView { unit: Some("tokens"), ..view(3, 1) };
        let bytes = LimitView { name: "bytes", unit: Some("content-bytes"), ..view(7, 1) };
        write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf], &[tokens, bytes, view(3, 1)], 0, 1000);
        assert_eq!(
            h["ratelimit-policy"],
            r#""per\"ip";q=10;qu="tokens";w=60, "bytes";q=10;qu="content-bytes";w=60, "per\"ip";q=10;w=60"#
        );
        assert_eq!(h["ratelimit"], r#""per\"ip";r=3;t=1, "bytes";r=7;t=1, "per\"ip";r=3;t=1"#, "no unit in RateLimit");
        let list: List = Parser::new(h["ratelimit-policy"].as_bytes()).parse().unwrap();
        let ListEntry::Item(first) = &list[0] else { panic!("an inner list") };
        assert_eq!(first.params.get("qu"), Some(&BareItem::String(sfv::String::from_string("tokens".into()).unwrap())));
    }

    #[test]
    fn draft6_and_x_styles() {
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Draft6, HeaderStyle::XRateLimit], &[view(3, 1)], 0, 1000);
        assert_eq!(h["ratelimit-limit"], "10");
        assert_eq!(h["ratelimit-remaining"], "3");
        assert_eq!(h["ratelimit-reset"], "1");
        assert_eq!(h["ratelimit-policy"], "10;w=60");
        assert_eq!(h["x-ratelimit-reset"], "1001");
        assert_eq!(h["x-ratelimit-remaining"], "3");
        assert_eq!(parsed(&h, "ratelimit-policy"), [item("10", &[("w", 60)])]);
        assert!(h.get("ratelimit").is_none());
    }

    #[test]
    fn two_policies_are_both_listed_and_the_denying_one_times_retry_after() {
        let (per_ip, burst) = (window(3, 60), TokenBucket::new(5, 0.5).unwrap().into());
        // The sliding window denies (its quota is back in 15 s, its whole state in 75 s); the
        // bucket, peeked, would have admitted.
        let views = [
            LimitView::new("per-ip", &per_ip, decision(false, 3, 0, 75 * NANOS_PER_SEC, 15 * NANOS_PER_SEC - 1)),
            LimitView::new("burst", &burst, decision(true, 5, 1, 8 * NANOS_PER_SEC, 0)),
        ];
        let mut h = HeaderMap::new();
        let styles = [HeaderStyle::Ietf, HeaderStyle::Draft6, HeaderStyle::XRateLimit];
        let secs = write_denied(&mut h, &styles, &views, Some(0), 1000);
        assert_eq!(h["ratelimit-policy"], r#""per-ip";q=3;w=60, "burst";q=5;w=10"#);
        assert_eq!(h["ratelimit"], r#""per-ip";r=0;t=15, "burst";r=1;t=8"#);
        assert_eq!((secs, &h["retry-after"]), (15, &HeaderValue::from(15)));
        // draft-6 and x-ratelimit describe the denying limit alone, with its full reset.
        assert_eq!(values(&h, &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"]), ["3", "0", "75"]);
        assert_eq!(h["x-ratelimit-reset"], "1075");
        assert_eq!(h["cache-control"], "no-store");
    }

    #[test]
    fn a_bucket_states_its_capacity_and_refill_time() {
        let view = |capacity, rate: f64| {
            let p: Policy = TokenBucket::new(capacity, rate).unwrap().into();
            let v = LimitView::new("b", &p, decision(true, capacity, 0, 0, 0));
            (v.decision.limit, v.window_secs())
        };
        assert_eq!(view(5, 0.5), (5, 10));
        // The per-token interval (1/3 s) is rounded up in the core; the window is still 10 s.
        assert_eq!(view(30, 3.0), (30, 10));
        assert_eq!(view(10, 3.0), (10, 4), "3.33 s, rounded up");
        assert_eq!(view(1, 1000.0), (1, 1), "a millisecond: at least 1 s");
        let leaky: Policy = sluice_core::LeakyBucket::new(2.0, 6, sluice_core::LeakMode::Police).unwrap().into();
        assert_eq!(LimitView::new("l", &leaky, decision(true, 6, 0, 0, 0)).window_secs(), 3);
    }

    #[test]
    fn names_are_escaped_or_percent_encoded() {
        let p = window(10, 60);
        let views = [
            LimitView::new("per\"ip", &p, decision(true, 10, 0, 2_500_000_000, 0)),
            LimitView::new("a\\b", &p, decision(true, 10, 1, 1, 0)),
            LimitView::new("ліміт ip\t", &p, decision(true, 10, 2, 1, 0)),
        ];
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf], &views, 0, 0);
        assert_eq!(
            h["ratelimit"],
            r#""per\"ip";r=0;t=3, "a\\b";r=1;t=1, "%D0%BB%D1%96%D0%BC%D1%96%D1%82 ip%09";r=2;t=1"#
        );
        let names: Vec<_> = parsed(&h, "ratelimit-policy").into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["per\"ip", "a\\b", "%D0%BB%D1%96%D0%BC%D1%96%D1%82 ip%09"]);
    }

    #[test]
    fn three_styles_together() {
        let mut h = HeaderMap::new();
        let styles = [HeaderStyle::XRateLimit, HeaderStyle::Draft6, HeaderStyle::Ietf];
        write_rate_limit_headers(&mut h, &styles, &[view(3, 30 * NANOS_PER_SEC)], 0, 1000);
        // One RateLimit-Policy, the ietf form, whatever the order of the styles.
        assert_eq!(parsed(&h, "ratelimit-policy"), [item("per\"ip", &[("q", 10), ("w", 60)])]);
        assert_eq!(parsed(&h, "ratelimit"), [item("per\"ip", &[("r", 3), ("t", 30)])]);
        assert_eq!(values(&h, &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"]), ["10", "3", "30"]);
        assert_eq!(
            values(&h, &["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]),
            ["10", "3", "1030"]
        );
        assert_eq!(h.len(), 8);
    }

    #[test]
    fn the_described_limit_is_the_one_draft6_shows_and_nothing_is_written_without_limits() {
        let (a, b) = (window(3, 60), window(100, 3600));
        let views = [
            LimitView::new("minute", &a, decision(true, 3, 2, NANOS_PER_SEC, 0)),
            LimitView::new("hour", &b, decision(true, 100, 1, 10 * NANOS_PER_SEC, 0)),
        ];
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Draft6], &views, 1, 0);
        assert_eq!(
            values(&h, &["ratelimit-limit", "ratelimit-remaining", "ratelimit-policy"]),
            ["100", "1", "100;w=3600"]
        );
        let mut h = HeaderMap::new();
        let none: [LimitView<'_>; 0] = [];
        write_rate_limit_headers(&mut h, &[HeaderStyle::Draft6, HeaderStyle::Ietf], &none, 0, 0);
        assert!(h.is_empty(), "{h:?}");
        assert_eq!(write_denied(&mut h, &[HeaderStyle::Ietf], &none, None, 0), 1);
        assert_eq!((h.len(), &h["retry-after"]), (2, &HeaderValue::from(1)));
    }

    #[test]
    fn partition_keys_are_byte_sequences_on_both_items() {
        let p = window(10, 60);
        let key = [0xde, 0xad, 0xbe, 0xef];
        let views =
            [view(3, NANOS_PER_SEC), LimitView::new("k", &p, decision(true, 10, 9, 1, 0)).with_partition_key(&key)];
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf], &views, 0, 0);
        assert_eq!(h["ratelimit-policy"], r#""per\"ip";q=10;w=60, "k";q=10;w=60;pk=:3q2+7w==:"#);
        assert_eq!(h["ratelimit"], r#""per\"ip";r=3;t=1, "k";r=9;t=1;pk=:3q2+7w==:"#);
        let pk = &parsed(&h, "ratelimit")[1].1[2];
        assert_eq!(pk, &("pk".to_string(), format!("{:?}", key.to_vec())));
    }

    #[test]
    fn every_header_written_parses_back() {
        let (sw, tb) = (window(7, 90), TokenBucket::new(1_000_000_000_000_000, 1e9).unwrap().into());
        let views = [
            LimitView::new("sw", &sw, decision(false, 7, 0, 100 * NANOS_PER_SEC, u64::MAX)),
            LimitView::new("huge", &tb, decision(true, 1_000_000_000_000_000, 999_999_999_999_999_999, 1, 0)),
        ];
        let mut h = HeaderMap::new();
        write_denied(&mut h, &[HeaderStyle::Ietf, HeaderStyle::XRateLimit], &views, Some(0), 5);
        let never = 999_999_999_999_999; // the largest Integer
        assert_eq!(
            parsed(&h, "ratelimit-policy"),
            [item("sw", &[("q", 7), ("w", 90)]), item("huge", &[("q", never), ("w", 1_000_000)])]
        );
        // "Never" (u64::MAX ns) is 18446744074 s, in Retry-After as in `t`.
        let forever = ceil_secs(u64::MAX);
        assert_eq!(
            parsed(&h, "ratelimit"),
            [item("sw", &[("r", 0), ("t", forever)]), item("huge", &[("r", never), ("t", 1)])]
        );
        assert_eq!(h["retry-after"], forever.to_string());
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Draft6], &views, 1, 0);
        assert_eq!(parsed(&h, "ratelimit-policy"), [item(&never.to_string(), &[("w", 1_000_000)])]);
    }

    #[test]
    fn retry_after_rounds_up_to_at_least_one_second() {
        let mut d = view(0, 0).decision;
        d.retry_after = 1;
        assert_eq!(retry_after_secs(&d), 1);
        d.retry_after = 0;
        assert_eq!(retry_after_secs(&d), 1);
        d.retry_after = NANOS_PER_SEC + 1;
        assert_eq!(retry_after_secs(&d), 2);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

        /// Whatever the limits are named (any Unicode, quotes, backslashes, control characters),
        /// the soft-limit mark is one RFC 9651 List with one string per name, in order, and no
        /// field at all when there is none; a mark sent by the client never survives.
        #[test]
        fn the_soft_limit_mark_is_always_one_list_a_reader_can_parse(names in proptest::collection::vec(".{0,12}", 0..5)) {
            let mut h = HeaderMap::new();
            h.append(SOFT_LIMITED, HeaderValue::from_static("forged"));
            mark_soft_limited(&mut h, names.iter().map(String::as_str));
            if names.is_empty() {
                proptest::prop_assert!(h.get(SOFT_LIMITED).is_none());
            } else {
                let read = parsed(&h, SOFT_LIMITED.as_str());
                proptest::prop_assert_eq!(read.len(), names.len());
                for ((got, params), name) in read.iter().zip(&names) {
                    proptest::prop_assert!(params.is_empty());
                    // Printable ASCII is kept as it is; anything else is percent-encoded.
                    if name.chars().all(|c| (' '..='~').contains(&c)) {
                        proptest::prop_assert_eq!(got, name);
                    } else {
                        proptest::prop_assert!(got.chars().all(|c| (' '..='~').contains(&c)), "{got:?}");
                    }
                }
            }
        }
    }
}
