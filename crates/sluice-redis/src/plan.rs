//! Policies as the script sees them: algorithm ids and parameters in microseconds, a fingerprint
//! of both, and the stored key of every (policy, key) pair.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;
use sluice_core::{Algorithm, CalendarWindows, LeakMode, Nanos, Policy};
use sluice_store::{KeyHash, NamedPolicy};

use crate::error::RedisStoreError;

/// The largest window or bucket span, in microseconds, that the script accepts: 2^50 us is
/// about 35 years, and keeps `now + 2 * span` below 2^53 until the year 2180.
pub const MAX_SPAN_MICROS: u64 = 1 << 50;
/// The largest limit or capacity the script accepts (about 10^12).
pub const MAX_LIMIT: u64 = 1 << 40;

const FIXED_WINDOW: u8 = 1;
const SLIDING_LOG: u8 = 2;
const SLIDING_WINDOW: u8 = 3;
const GCRA: u8 = 4;
const CALENDAR_WINDOW: u8 = 5;
const CALENDAR_SLIDING_WINDOW: u8 = 6;

/// One policy, ready to be sent.
#[derive(Debug, Clone)]
pub(crate) struct ScriptPolicy {
    /// The policy's limit (also the largest admissible cost).
    pub limit: u64,
    /// `prefix:policy:fingerprint:{`, to which a key's hex and `}` are appended.
    pub key_head: String,
    /// The check's arguments before the cost: algorithm, a, b, c. For a calendar window, what
    /// its fingerprint is made of (algorithm, limit, zone, period): the arguments it sends are
    /// [`ScriptPolicy::args_at`]'s.
    pub args: [String; 4],
    /// The same arguments as RESP bulk strings, as the lean path writes them.
    pub resp_args: Vec<u8>,
    /// The calendar of a calendar window, whose bounds the script is sent with each call.
    pub calendar: Option<CalendarWindows>,
    /// The script's algorithm id (`args[0]`): which bounds a calendar window sends.
    algorithm: u8,
}

impl ScriptPolicy {
    /// The arguments before the cost of a call at `at` (the caller's time) for a charge made at
    /// `charged_at` (settlements; `None` for decisions): the fixed ones, or a calendar window's
    /// in microseconds, around `at`:
    /// - a fixed window (5): `5, limit, start of the charge's window, start:end:next`;
    /// - a sliding window (6): `6, limit, start:end of the charge's window,
    ///   previous:start:end:next:after`, one window more on each side, since the counter weighs
    ///   the window before and a retry may fall in the window after.
    ///
    /// `at` is asked only of a calendar window.
    pub fn args_at(&self, at: impl FnOnce() -> Nanos, charged_at: Option<Nanos>) -> std::borrow::Cow<'_, [String; 4]> {
        let Some(c) = self.calendar else {
            return std::borrow::Cow::Borrowed(&self.args);
        };
        let us = |t: Nanos| (t / 1000).to_string();
        let (start, end) = c.bounds(at());
        let next = c.bounds(end).1;
        let charged = charged_at.map(|t| c.bounds(t));
        std::borrow::Cow::Owned(if self.algorithm == CALENDAR_WINDOW {
            [
                CALENDAR_WINDOW.to_string(),
                self.limit.to_string(),
                us(charged.map_or(0, |(s, _)| s)),
                format!("{}:{}:{}", us(start), us(end), us(next)),
            ]
        } else {
            let previous = c.bounds(start.saturating_sub(1)).0;
            let after = c.bounds(next).1;
            let (cs, ce) = charged.unwrap_or((0, 0));
            [
                CALENDAR_SLIDING_WINDOW.to_string(),
                self.limit.to_string(),
                format!("{}:{}", us(cs), us(ce)),
                format!("{}:{}:{}:{}:{}", us(previous), us(start), us(end), us(next), us(after)),
            ]
        })
    }

    /// [`ScriptPolicy::args_at`] as RESP bulk strings, appended to `out`.
    pub fn push_args_at(&self, out: &mut Vec<u8>, at: impl FnOnce() -> Nanos) {
        if self.calendar.is_none() {
            out.extend_from_slice(&self.resp_args);
            return;
        }
        for arg in self.args_at(at, None).iter() {
            crate::resp::bulk(out, arg.as_bytes());
        }
    }

    /// True for a bucket that polices (a token bucket, a policing leaky bucket): the only
    /// policies whose units a quota lease may hold (`scripts/hold.lua`).
    pub fn polices(&self) -> bool {
        self.algorithm == GCRA && self.args[3] == "-1"
    }

    /// The stored key of `key` under this policy.
    pub fn key(&self, key: &KeyHash) -> String {
        let mut k = Vec::with_capacity(self.key_len());
        self.push_key(&mut k, key);
        String::from_utf8(k).expect("key heads are checked ASCII names, and hex is ASCII")
    }

    /// The length of every stored key of this policy.
    pub fn key_len(&self) -> usize {
        self.key_head.len() + 33
    }

    /// Appends the stored key of `key` under this policy.
    pub fn push_key(&self, out: &mut Vec<u8>, key: &KeyHash) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 33];
        for (pair, b) in hex.chunks_exact_mut(2).zip(key.0) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 15)];
        }
        hex[32] = b'}';
        out.extend_from_slice(self.key_head.as_bytes());
        out.extend_from_slice(&hex);
    }
}

/// Accepts the names that go into keys verbatim ([`sluice_store::is_key_name`]).
pub(crate) fn check_name(field: &'static str, value: &str) -> Result<(), RedisStoreError> {
    if sluice_store::is_key_name(value) {
        Ok(())
    } else {
        Err(RedisStoreError::BadName { field, value: value.to_string() })
    }
}

/// Translates `named` for the script under `prefix`.
pub(crate) fn plan(prefix: &str, named: &NamedPolicy) -> Result<ScriptPolicy, RedisStoreError> {
    check_name("policy name", &named.name)?;
    let unsupported = |reason: String| RedisStoreError::Unsupported { policy: named.name.clone(), reason };
    let window_micros = |window: u64| {
        if !window.is_multiple_of(1000) {
            return Err(unsupported(format!(
                "window {window} ns is not a whole number of microseconds, the Redis store's resolution"
            )));
        }
        let us = window / 1000;
        if us > MAX_SPAN_MICROS {
            return Err(unsupported(format!("window {us} us exceeds the Redis store's bound of 2^50 us")));
        }
        Ok(us)
    };
    let calendar = named.policy.calendar_windows();
    let (algo, a, b, c): (u8, u64, u64, i64) = match &named.policy {
        Policy::FixedWindow(p) if calendar.is_some() => (CALENDAR_WINDOW, p.limit(), 0, 0),
        Policy::SlidingWindow(p) if calendar.is_some() => (CALENDAR_SLIDING_WINDOW, p.limit(), 0, 0),
        Policy::FixedWindow(p) => (FIXED_WINDOW, p.limit(), window_micros(p.window())?, 0),
        Policy::SlidingLog(p) => (SLIDING_LOG, p.limit(), window_micros(p.window())?, 0),
        Policy::SlidingWindow(p) => (SLIDING_WINDOW, p.limit(), window_micros(p.window())?, 0),
        Policy::TokenBucket(p) => (GCRA, p.capacity(), p.interval().div_ceil(1000), -1),
        Policy::LeakyBucket(p) => {
            let free = match p.mode() {
                LeakMode::Police => -1,
                LeakMode::Shape { delay } => i64::try_from(delay).unwrap_or(i64::MAX),
            };
            (GCRA, p.capacity(), p.interval().div_ceil(1000), free)
        }
    };
    if a > MAX_LIMIT {
        return Err(unsupported(format!("limit {a} exceeds the Redis store's bound of 2^40")));
    }
    if algo == GCRA && a.saturating_mul(b) > MAX_SPAN_MICROS {
        return Err(unsupported(format!(
            "capacity x interval ({a} x {b} us) exceeds the Redis store's bound of 2^50 us"
        )));
    }
    let args = match calendar {
        Some(cal) => [algo.to_string(), a.to_string(), cal.zone().name().to_string(), cal.period().name().to_string()],
        None => [algo.to_string(), a.to_string(), b.to_string(), c.to_string()],
    };
    let fingerprint = fingerprint(&args);
    let mut resp_args = Vec::new();
    for arg in &args {
        crate::resp::bulk(&mut resp_args, arg.as_bytes());
    }
    Ok(ScriptPolicy {
        limit: a,
        key_head: format!("{prefix}:{}:{fingerprint}:{{", named.name),
        args,
        resp_args,
        calendar,
        algorithm: algo,
    })
}

/// Eight hex digits that change when the algorithm or a parameter changes, so that state written
/// under other parameters is never read. Stable across builds and platforms (fixed SipHash keys).
fn fingerprint(args: &[String; 4]) -> String {
    let mut h = SipHasher13::new_with_keys(0x736c_7569_6365_2d72, 0x6564_6973_2d66_7021);
    for a in args {
        h.write(a.as_bytes());
        h.write_u8(b':');
    }
    format!("{:08x}", h.finish() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{FixedWindow, LeakyBucket, NANOS_PER_SEC, SlidingWindow, TokenBucket};

    fn named(name: &str, p: impl Into<Policy>) -> NamedPolicy {
        NamedPolicy { name: name.into(), policy: p.into() }
    }

    #[test]
    fn keys_hold_prefix_policy_fingerprint_and_tagged_hash() {
        let p = plan("sl", &named("per-ip", FixedWindow::new(10, NANOS_PER_SEC).unwrap())).unwrap();
        let k = p.key(&KeyHash([0xab; 16]));
        let parts: Vec<&str> = k.split(':').collect();
        assert_eq!(parts[0], "sl");
        assert_eq!(parts[1], "per-ip");
        assert_eq!(parts[2].len(), 8);
        assert_eq!(parts[3], format!("{{{}}}", "ab".repeat(16)));
        let mixed =
            KeyHash([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10]);
        assert!(p.key(&mixed).ends_with(&format!("{{{}}}", mixed.to_hex())));
        assert_eq!(p.args, ["1", "10", "1000000", "0"].map(String::from));
    }

    #[test]
    fn fingerprint_follows_parameters_not_names() {
        let fp = |p: &ScriptPolicy| p.key_head.split(':').nth(2).unwrap().to_string();
        let a = plan("s", &named("a", FixedWindow::new(10, NANOS_PER_SEC).unwrap())).unwrap();
        let b = plan("s", &named("b", FixedWindow::new(10, NANOS_PER_SEC).unwrap())).unwrap();
        let c = plan("s", &named("a", FixedWindow::new(11, NANOS_PER_SEC).unwrap())).unwrap();
        let d = plan("s", &named("a", SlidingWindow::new(10, NANOS_PER_SEC).unwrap())).unwrap();
        assert_eq!(fp(&a), fp(&b));
        assert_ne!(fp(&a), fp(&c));
        assert_ne!(fp(&a), fp(&d));
        // Pinned: instances built from other compilers or versions must agree.
        assert_eq!(fp(&a), "1dc4d797");
    }

    #[test]
    fn a_calendar_window_sends_the_bounds_around_the_callers_time() {
        use sluice_core::{CalendarWindows, Period, Zone};
        let zone = Zone::new("Test/Plus2", 7_200, vec![]).unwrap().interned();
        let daily = FixedWindow::calendar(5, CalendarWindows::new(Period::Day, zone)).unwrap();
        let p = plan("s", &named("d", daily)).unwrap();
        // Fingerprinted by zone and period; sent as algorithm 5 with the day and the next.
        assert_eq!(p.args, ["5", "5", "Test/Plus2", "1d"].map(String::from));
        let noon = (19_700 * 86_400 + 10 * 3_600) * NANOS_PER_SEC; // 12:00 at UTC+2
        let day = |d: u64| ((d * 86_400 - 7_200) * 1_000_000).to_string();
        let sent = p.args_at(|| noon, None);
        assert_eq!(
            *sent,
            ["5".into(), "5".into(), "0".into(), format!("{}:{}:{}", day(19_700), day(19_701), day(19_702))]
        );
        // A settlement names the start of the day its charge was made in.
        let yesterday = noon - 86_400 * NANOS_PER_SEC;
        assert_eq!(p.args_at(|| noon, Some(yesterday))[2], day(19_699));
        let other =
            plan("s", &named("d", FixedWindow::calendar(5, CalendarWindows::new(Period::Month, zone)).unwrap()));
        assert_ne!(p.key_head, other.unwrap().key_head, "another period, another key");
    }

    #[test]
    fn a_calendar_sliding_window_sends_a_window_more_on_each_side() {
        use sluice_core::{CalendarWindows, Period, Zone};
        let zone = Zone::new("Test/Plus2", 7_200, vec![]).unwrap().interned();
        let daily = SlidingWindow::calendar(5, CalendarWindows::new(Period::Day, zone)).unwrap();
        let p = plan("s", &named("d", daily)).unwrap();
        assert_eq!(p.args, ["6", "5", "Test/Plus2", "1d"].map(String::from));
        let noon = (19_700 * 86_400 + 10 * 3_600) * NANOS_PER_SEC;
        let day = |d: u64| ((d * 86_400 - 7_200) * 1_000_000).to_string();
        let sent = p.args_at(|| noon, Some(noon - 86_400 * NANOS_PER_SEC));
        let bounds = [19_699, 19_700, 19_701, 19_702, 19_703].map(day).join(":");
        assert_eq!(*sent, ["6".into(), "5".into(), format!("{}:{}", day(19_699), day(19_700)), bounds]);
        let fixed = plan("s", &named("d", FixedWindow::calendar(5, CalendarWindows::new(Period::Day, zone)).unwrap()));
        assert_ne!(p.key_head, fixed.unwrap().key_head, "another algorithm, another key");
    }

    #[test]
    fn buckets_round_the_interval_up_to_microseconds() {
        let tb = plan("s", &named("t", TokenBucket::new(5, 3.0).unwrap())).unwrap();
        // 1/3 s = 333_333_334 ns, rounded up to 333_334 us.
        assert_eq!(tb.args, ["4", "5", "333334", "-1"].map(String::from));
        let lb = plan("s", &named("l", LeakyBucket::new(2.0, 3, LeakMode::Shape { delay: 1 }).unwrap())).unwrap();
        assert_eq!(lb.args, ["4", "3", "500000", "1"].map(String::from));
    }

    #[test]
    fn rejects_what_the_script_cannot_represent() {
        let sub_us = plan("s", &named("w", FixedWindow::new(1, 1500).unwrap()));
        assert!(matches!(sub_us, Err(RedisStoreError::Unsupported { .. })));
        let huge = plan("s", &named("w", FixedWindow::new(1 << 41, NANOS_PER_SEC).unwrap()));
        assert!(matches!(huge, Err(RedisStoreError::Unsupported { .. })));
        let span = plan("s", &named("t", TokenBucket::new(1 << 21, 0.001).unwrap()));
        assert!(matches!(span, Err(RedisStoreError::Unsupported { .. })));
        let brace = plan("s", &named("a{b}", FixedWindow::new(1, NANOS_PER_SEC).unwrap()));
        assert!(matches!(brace, Err(RedisStoreError::BadName { .. })));
    }
}
