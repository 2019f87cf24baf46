//! Passive health: a target that fails `eject_after` times in a row is taken out of its
//! upstream's rotation for `eject_for`, doubled for each ejection in a row (at most 64 times).
//! When the time is up one request tries it again: a failure takes it out once more (for twice
//! as long), a success puts it back for good. Health is kept by target across reloads
//! ([`HealthBook`]): a reload that leaves a target alone leaves it ejected or not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use sluice_config::Ejection;

/// Nanoseconds since the first time this process asked (what `ejected_until` is written in).
pub fn now_nanos() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One target's health and load.
#[derive(Debug, Default)]
pub struct TargetHealth {
    /// Failures in a row since the last success (or the last ejection).
    failures: AtomicU32,
    /// Until when it is out of the rotation ([`now_nanos`]); 0: never ejected.
    ejected_until: AtomicU64,
    /// Ejections in a row (the backoff's exponent); 0 after a success.
    ejections: AtomicU32,
    /// Requests sent to it and waiting for their response head (`least-requests`).
    pub waiting: AtomicUsize,
    /// Out of rotation by its active health checks.
    checked_down: AtomicBool,
    /// Health check answers in a row that disagree with `checked_down`.
    check_streak: AtomicU32,
    /// When it is next asked ([`now_nanos`]).
    next_check: AtomicU64,
}

impl TargetHealth {
    /// Whether a request may go to it at `now`.
    pub fn available(&self, now: u64) -> bool {
        now >= self.ejected_until.load(Ordering::Relaxed) && !self.checked_down.load(Ordering::Relaxed)
    }

    /// How it stands at `now`: `up`, `down` (out by its health checks) or `ejected` (out by
    /// its failures), with the nanoseconds left of an ejection.
    pub fn state(&self, now: u64) -> (&'static str, Option<u64>) {
        if self.checked_down.load(Ordering::Relaxed) {
            return ("down", None);
        }
        match self.ejected_until.load(Ordering::Relaxed) {
            until if until > now => ("ejected", Some(until - now)),
            _ => ("up", None),
        }
    }

    /// Whether its next health check is due at `now`; if so, the one after is set `interval`
    /// later.
    pub fn check_due(&self, now: u64, interval: u64) -> bool {
        let next = self.next_check.load(Ordering::Relaxed);
        now >= next
            && self
                .next_check
                .compare_exchange(next, now.saturating_add(interval), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// A health check's answer (`healthy` or not); `Some(up)` when it changed the target's
    /// state: `healthy_after` healthy answers in a row put it back, `unhealthy_after`
    /// unhealthy ones take it out.
    pub fn checked(&self, healthy: bool, healthy_after: u32, unhealthy_after: u32) -> Option<bool> {
        let down = self.checked_down.load(Ordering::Relaxed);
        if healthy != down {
            // An answer that agrees with the state it is in.
            self.check_streak.store(0, Ordering::Relaxed);
            return None;
        }
        let streak = self.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let needed = if healthy { healthy_after } else { unhealthy_after };
        if streak < needed {
            return None;
        }
        self.check_streak.store(0, Ordering::Relaxed);
        self.checked_down.store(!healthy, Ordering::Relaxed);
        if healthy {
            // Back by its checks: passive health starts over too.
            self.ejected_until.store(0, Ordering::Relaxed);
            self.succeeded();
        }
        Some(healthy)
    }

    /// A request to it succeeded (a response head that does not count as a failure).
    pub fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.ejections.load(Ordering::Relaxed) != 0 {
            self.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// A request to it failed at `now`; true when this failure ejected it. A target back from
    /// an ejection is ejected again by its first failure.
    pub fn failed(&self, now: u64, eject: &Ejection) -> bool {
        if eject.after == 0 {
            return false;
        }
        let ejections = self.ejections.load(Ordering::Relaxed);
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < eject.after && ejections == 0 {
            return false;
        }
        let backoff = eject.base.saturating_mul(1 << ejections.min(6));
        self.ejected_until.store(now.saturating_add(backoff), Ordering::Relaxed);
        self.ejections.store(ejections.saturating_add(1), Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        true
    }
}

/// Every target's health, by upstream name and target URL, kept across reloads.
#[derive(Debug, Default)]
pub struct HealthBook(Mutex<HashMap<(String, String), Arc<TargetHealth>>>);

impl HealthBook {
    /// The health of `url` in the upstream `name`: the one kept from the configuration before,
    /// or a new one.
    pub fn of(&self, name: &str, url: &str) -> Arc<TargetHealth> {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        book.entry((name.to_string(), url.to_string())).or_default().clone()
    }

    /// Forgets the targets no configuration in force has (`keep` says which are).
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).retain(|(n, u), _| keep(n, u));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EJECT: Ejection = Ejection { after: 3, base: 1_000, on_5xx: false };

    #[test]
    fn three_failures_eject_for_a_backoff_that_doubles_and_a_success_resets_it() {
        let h = TargetHealth::default();
        assert!(!h.failed(0, &EJECT) && !h.failed(0, &EJECT));
        assert!(h.available(0));
        assert!(h.failed(10, &EJECT), "the third in a row ejects");
        assert!(!h.available(1_009) && h.available(1_010));
        assert_eq!(h.state(1_000), ("ejected", Some(10)));
        assert_eq!(h.state(1_010), ("up", None));
        // Back: one failure ejects it again, for twice as long.
        assert!(h.failed(1_010, &EJECT));
        assert!(!h.available(3_009) && h.available(3_010));
        assert!(h.failed(3_010, &EJECT));
        assert!(!h.available(7_009) && h.available(7_010));
        // A success puts it back for good: three failures again before an ejection.
        h.succeeded();
        assert!(!h.failed(8_000, &EJECT) && !h.failed(8_000, &EJECT) && h.failed(8_000, &EJECT));
        assert!(h.available(9_000));
        // The backoff stops doubling at 64 times the base.
        let h = TargetHealth::default();
        for _ in 0..20 {
            for _ in 0..3 {
                h.failed(0, &EJECT);
            }
        }
        assert!(h.available(64_000));
        // eject_after = 0: never.
        let h = TargetHealth::default();
        for _ in 0..10 {
            assert!(!h.failed(0, &Ejection::NEVER));
        }
        assert!(h.available(0));
    }

    #[test]
    fn health_checks_take_a_target_out_and_put_it_back_after_streaks() {
        let h = TargetHealth::default();
        assert_eq!(h.checked(false, 2, 3), None);
        assert_eq!(h.checked(true, 2, 3), None, "a healthy answer breaks the streak");
        assert_eq!((h.checked(false, 2, 3), h.checked(false, 2, 3)), (None, None));
        assert_eq!(h.checked(false, 2, 3), Some(false), "three unhealthy in a row");
        assert!(!h.available(u64::MAX));
        assert_eq!(h.state(0), ("down", None));
        assert_eq!(h.checked(true, 2, 3), None);
        assert_eq!(h.checked(true, 2, 3), Some(true), "two healthy in a row");
        assert!(h.available(0));
        assert!(h.check_due(0, 100) && !h.check_due(50, 100) && h.check_due(100, 100));
    }
}
