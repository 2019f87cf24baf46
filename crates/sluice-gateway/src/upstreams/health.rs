//! Passive health: a target that fails `eject_after` times in a row is taken out of its
//! upstream's rotation for `eject_for`, doubled for each ejection in a row (at most 64 times).
//! When the time is up one request tries it again: a failure takes it out once more (for twice
//! as long), a success puts it back for good. Health is kept by target across reloads
//! ([`HealthBook`]): a reload that leaves a target alone leaves it ejected or not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
}

impl TargetHealth {
    /// Whether a request may go to it at `now`.
    pub fn available(&self, now: u64) -> bool {
        now >= self.ejected_until.load(Ordering::Relaxed)
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
}
