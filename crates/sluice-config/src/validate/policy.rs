//! `[[policy]]`: an algorithm and its parameters, as a core `Policy`.

use std::ops::Range;

use sluice_core::{
    ALGORITHM_NAMES, AlgorithmKind, CalendarWindows, FixedWindow, LeakMode, LeakyBucket, Period, Policy, SlidingLog,
    SlidingWindow, TokenBucket,
};

use crate::defaults::{DEFAULT_LEASE, MAX_SLIDING_LOG_LIMIT};
use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;

/// Why a sliding log refuses calendar windows.
const SLIDING_LOG_HAS_NO_CALENDAR: &str = "a sliding log counts the `window` before each request and has no \
     boundaries to put on a calendar; use `sliding-window` with `align = \"calendar\"`, or a duration such as `24h`";

/// The `i`th `[[policy]]`, at `span`.
pub(super) fn policy(
    src: &Source<'_>,
    i: usize,
    span: &Range<usize>,
    p: RawPolicy,
) -> Result<PolicyConfig, ConfigError> {
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(span, field)), format!("policy[{i}].{field}"), msg);
    if p.name.is_empty() {
        return Err(err("name", "must not be empty".into()));
    }
    let present: [(&str, bool); 11] = [
        ("limit", p.limit.is_some()),
        ("window", p.window.is_some()),
        ("capacity", p.capacity.is_some()),
        ("refill_per_second", p.refill_per_second.is_some()),
        ("rate_per_second", p.rate_per_second.is_some()),
        ("mode", p.mode.is_some()),
        ("delay", p.delay.is_some()),
        ("max_in_flight", p.max_in_flight.is_some()),
        ("lease", p.lease.is_some()),
        ("align", p.align.is_some()),
        ("timezone", p.timezone.is_some()),
    ];
    let only = |allowed: &[&str]| match present.iter().find(|(f, there)| *there && !allowed.contains(f)) {
        Some((field, _)) => {
            Err(err(field, format!("does not apply to {} (it takes {})", p.algorithm, allowed.join(", "))))
        }
        None => Ok(()),
    };
    if p.algorithm == "concurrency" {
        only(&["max_in_flight", "lease"])?;
        let max = p.max_in_flight.ok_or_else(|| err("max_in_flight", "concurrency needs `max_in_flight`".into()))?;
        if max == 0 || max > MAX_SLIDING_LOG_LIMIT {
            return Err(err(
                "max_in_flight",
                format!("{max}: a concurrency limit holds 1 to {MAX_SLIDING_LOG_LIMIT} requests in flight"),
            ));
        }
        let lease = parse_duration(p.lease.as_deref().unwrap_or(DEFAULT_LEASE)).map_err(|m| err("lease", m))?;
        let policy = SlidingLog::new(max, lease).map_err(|e| err("lease", e.to_string()))?.into();
        let (shadow, soft) = enforcement(&p.enforce, p.shadow).map_err(|(f, m)| err(f, m))?;
        let unit = unit(p.unit).map_err(|m| err("unit", m))?.or_else(|| Some("concurrent-requests".into()));
        return Ok(PolicyConfig { name: p.name, policy, shadow, soft, unit, lease: false, concurrency: true });
    }
    let Some(kind) = AlgorithmKind::parse(&p.algorithm) else {
        let known = ALGORITHM_NAMES.join(", ");
        return Err(err("algorithm", format!("unknown algorithm `{}` ({known}, concurrency)", p.algorithm)));
    };
    if let Some(why) = p.lease.as_ref().and(not_leased(kind, p.mode.as_deref())) {
        return Err(err("lease", why.into()));
    }
    let allowed: &[&str] = match kind {
        AlgorithmKind::FixedWindow => &["limit", "window", "align", "timezone", "lease"],
        AlgorithmKind::SlidingWindow => &["limit", "window", "align", "timezone"],
        AlgorithmKind::SlidingLog => &["limit", "window"],
        AlgorithmKind::TokenBucket => &["capacity", "refill_per_second", "lease"],
        AlgorithmKind::LeakyBucket => &["rate_per_second", "capacity", "mode", "delay", "lease"],
    };
    if kind == AlgorithmKind::SlidingLog && (p.align.as_deref() == Some("calendar") || p.timezone.is_some()) {
        let field = if p.align.is_some() { "align" } else { "timezone" };
        return Err(err(field, SLIDING_LOG_HAS_NO_CALENDAR.into()));
    }
    only(allowed)?;
    let need = |field: &str| err(field, format!("{} needs `{field}`", p.algorithm));
    let param = |field: &str, e: sluice_core::ParamError| err(field, e.to_string());
    let windowed = || -> Result<(u64, u64), ConfigError> {
        let limit = p.limit.ok_or_else(|| need("limit"))?;
        let text = p.window.as_deref().ok_or_else(|| need("window"))?;
        let window = parse_duration(text).map_err(|m| match Period::parse(text) {
            Some(_) if kind == AlgorithmKind::SlidingLog => {
                err("window", format!("`{text}` is a calendar window: {SLIDING_LOG_HAS_NO_CALENDAR}"))
            }
            Some(_) => err("window", format!("`{text}` is a calendar window: add `align = \"calendar\"`")),
            None => err("window", m),
        })?;
        Ok((limit, window))
    };
    let calendar = match kind {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => {
            calendar_windows(&p).map_err(|(field, m)| err(field, m))?
        }
        _ => None,
    };
    let policy: Policy = match kind {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow if calendar.is_some() => {
            let (limit, windows) = calendar.expect("checked");
            let made = match kind {
                AlgorithmKind::FixedWindow => FixedWindow::calendar(limit, windows).map(Policy::from),
                _ => SlidingWindow::calendar(limit, windows).map(Policy::from),
            };
            made.map_err(|e| param("limit", e))?
        }
        AlgorithmKind::FixedWindow => {
            let (l, w) = windowed()?;
            FixedWindow::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::SlidingLog => {
            let (l, w) = windowed()?;
            if l > MAX_SLIDING_LOG_LIMIT {
                return Err(err(
                    "limit",
                    format!(
                        "{l} is too large for a sliding log, which keeps one timestamp per admitted request \
                         (at most {MAX_SLIDING_LOG_LIMIT}); use sliding-window for large limits"
                    ),
                ));
            }
            SlidingLog::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::SlidingWindow => {
            let (l, w) = windowed()?;
            SlidingWindow::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::TokenBucket => {
            let c = p.capacity.ok_or_else(|| need("capacity"))?;
            let r = p.refill_per_second.ok_or_else(|| need("refill_per_second"))?;
            TokenBucket::new(c, r).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::LeakyBucket => {
            let r = p.rate_per_second.ok_or_else(|| need("rate_per_second"))?;
            let c = p.capacity.ok_or_else(|| need("capacity"))?;
            let mode = match p.mode.as_deref().unwrap_or("police") {
                "police" if p.delay.is_some() => {
                    return Err(err("delay", "applies only to mode = \"shape\"".into()));
                }
                "police" => LeakMode::Police,
                "shape" => LeakMode::Shape { delay: p.delay.unwrap_or(0) },
                other => return Err(err("mode", format!("`{other}` is neither `police` nor `shape`"))),
            };
            LeakyBucket::new(r, c, mode).map_err(|e| param(field_of(&e), e))?.into()
        }
    };
    let (shadow, soft) = enforcement(&p.enforce, p.shadow).map_err(|(f, m)| err(f, m))?;
    let unit = unit(p.unit).map_err(|m| err("unit", m))?;
    let lease = match p.lease.as_deref() {
        None | Some("off") => false,
        Some("auto") => true,
        Some(other) => {
            return Err(err(
                "lease",
                format!("`{other}` is not `auto` (quota leases for hot keys) or `off` (every request to the store)"),
            ));
        }
    };
    Ok(PolicyConfig { name: p.name, policy, shadow, soft, unit, lease, concurrency: false })
}

/// Why an algorithm takes no quota leases (`lease = "auto"`); `None` for a fixed window, a
/// token bucket and a leaky bucket that polices (`mode`, as written).
fn not_leased(kind: AlgorithmKind, mode: Option<&str>) -> Option<&'static str> {
    match kind {
        AlgorithmKind::FixedWindow | AlgorithmKind::TokenBucket => None,
        AlgorithmKind::LeakyBucket if mode.unwrap_or("police") == "police" => None,
        AlgorithmKind::LeakyBucket => Some(
            "a leaky bucket that shapes delays requests, and a lease admits at once: lease one that polices \
             (mode = \"police\", the default) (docs/src/scaling.md)",
        ),
        AlgorithmKind::SlidingLog | AlgorithmKind::SlidingWindow => Some(
            "a sliding window cannot be leased exactly: units spent after they were leased would leave the window \
             early, and the window would admit beyond its limit (docs/src/scaling.md)",
        ),
    }
}

/// The limit and windows of a fixed or sliding window that follows the calendar
/// (`align = "calendar"`, a `window` of `1d`, `1w`, `1mo` or `1y`, a `timezone`, UTC unless
/// given); `None` for windows aligned to the epoch; or the field at fault and why.
fn calendar_windows(p: &RawPolicy) -> Result<Option<(u64, CalendarWindows)>, (&'static str, String)> {
    match p.align.as_deref() {
        Some("calendar") => {}
        Some("epoch") | None if p.timezone.is_none() => return Ok(None),
        Some("epoch") | None => {
            return Err(("timezone", "applies only to `align = \"calendar\"` (windows of the calendar)".into()));
        }
        Some(other) => {
            return Err((
                "align",
                format!(
                    "`{other}` is not one of `epoch` (every window's length since 1970, the default) \
                     or `calendar` (days, weeks, months, years of a time zone)"
                ),
            ));
        }
    }
    let limit = p.limit.ok_or(("limit", format!("{} needs `limit`", p.algorithm)))?;
    let text = p.window.as_deref().ok_or(("window", format!("{} needs `window`", p.algorithm)))?;
    let period = Period::parse(text).ok_or_else(|| {
        (
            "window",
            format!("`{text}`: a calendar window is one of {}", Period::ALL_NAMES.map(|n| format!("`{n}`")).join(", ")),
        )
    })?;
    let zone = crate::time_zone(p.timezone.as_deref().unwrap_or("UTC")).map_err(|m| ("timezone", m))?;
    Ok(Some((limit, CalendarWindows::new(period, zone))))
}

/// `(shadow, soft)` from `enforce` and the older `shadow` flag; or the field at fault and why.
fn enforcement(enforce: &Option<String>, shadow: bool) -> Result<(bool, bool), (&'static str, String)> {
    match (enforce.as_deref(), shadow) {
        (None, shadow) => Ok((shadow, false)),
        (Some("shadow"), _) => Ok((true, false)),
        (Some("hard"), false) => Ok((false, false)),
        (Some("soft"), false) => Ok((false, true)),
        (Some("hard" | "soft"), true) => {
            Err(("shadow", "`shadow = true` is `enforce = \"shadow\"`: give one of them".into()))
        }
        (Some(other), _) => Err((
            "enforce",
            format!(
                "`{other}` is not one of `hard` (deny), `soft` (pass and tell the upstream), `shadow` (pass, tell nobody)"
            ),
        )),
    }
}

/// The unit the file gives: `None` for requests (or none given).
fn unit(given: Option<String>) -> Result<Option<String>, String> {
    match given {
        Some(u) if u == "requests" => Ok(None),
        Some(u) if is_unit(&u) => Ok(Some(u)),
        Some(u) => Err(format!(
            "`{u}` is not a unit: lowercase letters, digits and `-`, starting with a letter, at most 32 \
             (`requests`, `content-bytes`, `concurrent-requests`, or your own, e.g. `tokens`)"
        )),
        None => Ok(None),
    }
}

/// A quota unit as sluice writes it: a short lowercase word (the draft's registered units and
/// the names operators give their own).
fn is_unit(u: &str) -> bool {
    u.len() <= 32
        && u.starts_with(|c: char| c.is_ascii_lowercase())
        && u.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn field_of(e: &sluice_core::ParamError) -> &'static str {
    match e {
        sluice_core::ParamError::Zero { field }
        | sluice_core::ParamError::BadRate { field, .. }
        | sluice_core::ParamError::TooLarge { field } => field,
        sluice_core::ParamError::DelayTooLarge { .. } => "delay",
    }
}
