//! A response's concurrency slots: given back when it ends, and renewed while it lives.
//!
//! A slot is a lease (`policy.lease`): an entry of a sliding log that leaves it by itself when
//! the lease ends, so that an instance killed mid-request gives its slots back within one
//! lease. A request that lives longer keeps its slots by renewing them: every third of the
//! lease, each slot is given back where it was charged and charged again now, in one call to
//! the store (one script on Redis), so the key never counts it twice nor drops it between the
//! two. A renewal and the release never overlap: the release waits for a renewal in flight, and
//! gives back where that renewal charged.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_core::Nanos;
use sluice_store::{Check, Settle, Store};

/// The slots a response holds, and the task renewing them (aborted when they are given back).
pub(crate) struct Held {
    shared: Arc<Mutex<Slots>>,
    store: Arc<dyn Store>,
    renewer: Option<tokio::task::AbortHandle>,
}

struct Slots {
    /// Each slot's charge, at the time it was last renewed.
    slots: Vec<Settle>,
    /// The response has ended: nothing more to renew.
    released: bool,
    /// A renewal is in the store: the release is left to it.
    renewing: bool,
}

impl Held {
    /// Slots charged in `store`, each with its lease; renewed on the current runtime (none
    /// there: held for their lease only).
    pub(crate) fn new(store: Arc<dyn Store>, slots: Vec<(Settle, Nanos)>) -> Self {
        let every = slots.iter().map(|(_, lease)| *lease).min().unwrap_or(0) / 3;
        // Each is given back whole: settled to 0.
        let slots = slots.into_iter().map(|(s, _)| Settle { actual: 0, ..s }).collect();
        let shared = Arc::new(Mutex::new(Slots { slots, released: false, renewing: false }));
        let renewer = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if every > 0 => {
                let task = renew(Arc::downgrade(&shared), store.clone(), Duration::from_nanos(every));
                Some(runtime.spawn(task).abort_handle())
            }
            _ => None,
        };
        Self { shared, store, renewer }
    }

    /// The response has ended: each slot given back where it was last charged (at once, or by
    /// the renewal in flight when it is done). Once only.
    pub(crate) fn release(&mut self) {
        let slots = {
            let mut g = lock(&self.shared);
            if std::mem::replace(&mut g.released, true) || g.renewing {
                return;
            }
            std::mem::take(&mut g.slots)
        };
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
        super::settle(&self.store, slots);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
    }
}

fn lock(shared: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Renews the slots every `every` until they are released (or the holder is gone).
async fn renew(shared: std::sync::Weak<Mutex<Slots>>, store: Arc<dyn Store>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else { return };
        // The store's own time where this process keeps it, else this machine's, in whole
        // microseconds (Redis's resolution): the slots are charged again at a time the next
        // renewal and the release can name.
        let now = store.now().unwrap_or_else(sluice_core::wall_clock_now);
        let now = now - now % 1_000;
        let renewal: Vec<Settle> = {
            let mut g = lock(&shared);
            if g.released {
                return;
            }
            g.renewing = true;
            g.slots
                .iter()
                .flat_map(|s| {
                    let again = Settle { check: Check { cost: 0, ..s.check }, charged_at: now, actual: s.check.cost };
                    [*s, again]
                })
                .collect()
        };
        let renewed = store.settle(&renewal, Some(now)).await;
        let released = {
            let mut g = lock(&shared);
            g.renewing = false;
            match renewed {
                Ok(()) => g.slots.iter_mut().for_each(|s| s.charged_at = now),
                Err(e) => {
                    tracing::warn!(target: "sluice::store", error = %e, "a concurrency slot could not be renewed: it lasts its lease")
                }
            }
            g.released.then(|| std::mem::take(&mut g.slots))
        };
        if let Some(slots) = released {
            if let Err(e) = store.settle(&slots, Some(now)).await {
                tracing::warn!(target: "sluice::store", error = %e, "a concurrency slot could not be given back: it lasts its lease");
            }
            return;
        }
    }
}
