//! Whether the store decides: a run of failures is logged once when it starts, with its cause,
//! and once when it ends; every failure is counted. Every face that reports on its store — the
//! gateway's observer, the tower layer without one — tells it the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sluice_store::StoreError;

use crate::enforce::Outcome;

/// The log target of events (a failure's start and end, reloads): `sluice::event`.
pub const EVENT_TARGET: &str = "sluice::event";

/// A store's failures as its face saw them.
///
/// ```
/// use sluice_http::store_health::StoreHealth;
/// use sluice_store::StoreError;
/// let health = StoreHealth::default();
/// health.failed("redis", &StoreError::Timeout(50)); // logged: the first of a run
/// health.failed("redis", &StoreError::Timeout(50)); // counted only
/// assert!(health.failing() && health.failures() == 2);
/// health.answered(); // logged: the store decides again
/// assert!(!health.failing());
/// ```
#[derive(Debug, Default)]
pub struct StoreHealth {
    /// True from a failure (or a failure mode's verdict) until the store itself decides again.
    failing: AtomicBool,
    /// Every failure seen, failure modes' verdicts included.
    failures: AtomicU64,
}

impl StoreHealth {
    /// What a ruling's `outcome` says of the store `store` (its kind: `memory`, `redis`...): a
    /// failure, a failure mode's verdict (a failure too), or the store's own decision. A
    /// verdict a deny cache repeated says nothing of the store.
    pub fn saw(&self, store: &'static str, outcome: &Result<Outcome, StoreError>) {
        match outcome {
            Err(e) => self.failed(store, e),
            Ok(o) => match &o.degraded {
                Some(d) => self.failed(store, &d.error),
                None if o.store_answered => self.answered(),
                None => {}
            },
        }
    }

    /// The store `store` could not decide: counted; logged if it is the first of a run.
    pub fn failed(&self, store: &'static str, e: &StoreError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: EVENT_TARGET,
                event = "store_failure",
                store,
                kind = e.kind(),
                error = %e,
                "the store cannot decide"
            );
        }
    }

    /// The store decided: logged if it ends a run of failures.
    pub fn answered(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(target: EVENT_TARGET, event = "store_recovered", "the store decides again");
        }
    }

    /// True from a failure until the store decides again.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Every failure seen so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}
