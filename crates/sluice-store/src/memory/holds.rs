//! Units of a policing bucket set apart for quota leases ([`crate::Store::hold`]), beside the
//! table's shards: what every decision of a key with holds must leave alone.
//!
//! A table has holds only once a lease took some (a bucket policy with `lease = "auto"`); until
//! then, and for every other table, deciding costs one atomic load, read under the shard's lock
//! (so a decision that saw no holds finished before the first hold looked at the shard). A
//! decision of a table with holds takes the table's holds lock first, then the shards: the same
//! order as a hold, so the two never deadlock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use sluice_core::{Decision, Nanos};

use super::table::Table;
use crate::key::KeyHash;

/// One hold: its id, its units, and when it ends (counted as wholly spent then).
#[derive(Debug, Clone, Copy)]
struct Held {
    id: u64,
    units: u64,
    until: Nanos,
}

/// A key's holds.
#[derive(Debug, Default)]
pub(crate) struct KeyHolds {
    /// The sum of the units of `holds`.
    held: u64,
    holds: Vec<Held>,
}

/// A table's holds.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// Set by the first hold, never cleared: a decision reads it under its shard's lock.
    active: AtomicBool,
    /// The last hold's id: ids are the table's, never reused (a release that comes after its
    /// hold ended must not end another).
    last_id: AtomicU64,
    keys: Mutex<HashMap<KeyHash, KeyHolds>>,
}

impl Holds {
    /// Whether any key of the table ever held units.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<KeyHash, KeyHolds>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn activate(&self) {
        self.active.store(true, Ordering::SeqCst);
    }
}

/// Ends `key`'s holds whose time is up at `now`, each charged in full at its end (`tat =
/// max(tat, until) + units x interval`), the earliest first; forgets the key when none is left.
pub(crate) fn reap(table: &Table, keys: &mut HashMap<KeyHash, KeyHolds>, key: &KeyHash, now: Nanos) {
    let Some(k) = keys.get_mut(key) else { return };
    if k.holds.iter().all(|h| h.until > now) {
        return;
    }
    k.holds.sort_by_key(|h| h.until);
    let ended = k.holds.partition_point(|h| h.until <= now);
    let mut shard = table.lock(table.shard_of(key));
    for h in k.holds.drain(..ended) {
        k.held -= h.units;
        // Room was there when the units were held, and an overrun's cap is two capacities.
        shard.settle(key, h.until, 0, h.units, h.until);
    }
    if k.holds.is_empty() {
        keys.remove(key);
    }
}

/// Units `key` holds now (after [`reap`]), and when its first hold ends.
pub(crate) fn held(keys: &HashMap<KeyHash, KeyHolds>, key: &KeyHash) -> (u64, Option<Nanos>) {
    keys.get(key).map_or((0, None), |k| (k.held, k.holds.iter().map(|h| h.until).min()))
}

/// A decision of `cost` made at `cost + held` ([`crate::Store::hold`]'s rule), told as the key
/// sees it: what is left beside the holds. `at_held` is the bucket's decision at `cost + held`
/// when that is within its capacity, else `None` (denied: the units come back only when a hold
/// ends, at `first_end`).
pub(crate) fn beside(
    at_held: Option<Decision>,
    capacity: u64,
    held: u64,
    first_end: Option<Nanos>,
    now: Nanos,
) -> Decision {
    match at_held {
        Some(d) if d.allowed => d,
        Some(d) => Decision { remaining: d.remaining.saturating_sub(held), ..d },
        None => {
            let wait = first_end.map_or(1, |t| t.saturating_sub(now).max(1));
            Decision { allowed: false, limit: capacity, remaining: 0, reset_after: wait, retry_after: wait, delay: 0 }
        }
    }
}

/// Sets `units` of `key` apart until `now + life`, if the bucket has room for them beside its
/// holds. Returns the id (0 when refused) and the decision.
pub(crate) fn hold(
    table: &Table,
    capacity: u64,
    key: &KeyHash,
    units: u64,
    life: Nanos,
    now: impl FnOnce() -> Nanos,
) -> (u64, Decision, Nanos) {
    table.holds.activate();
    let mut keys = table.holds.lock();
    let now = now();
    reap(table, &mut keys, key, now);
    let (held, first_end) = held(&keys, key);
    let want = units + held;
    let at_held = if want <= capacity {
        let mut shard = table.lock(table.shard_of(key));
        shard.peek(key, now, want).ok()
    } else {
        None
    };
    let d = beside(at_held, capacity, held, first_end, now);
    if !d.allowed {
        return (0, d, now);
    }
    let id = table.holds.last_id.fetch_add(1, Ordering::Relaxed) + 1;
    let k = keys.entry(*key).or_default();
    k.held += units;
    k.holds.push(Held { id, units, until: now.saturating_add(life) });
    (id, d, now)
}

/// Ends hold `id` of `key`, of which `spent` units were admitted: charged now. A hold that ended
/// already (charged in full when reaped) is left alone.
pub(crate) fn release(table: &Table, key: &KeyHash, id: u64, spent: u64, now: impl FnOnce() -> Nanos) {
    if !table.holds.active() {
        return;
    }
    let mut keys = table.holds.lock();
    let now = now();
    reap(table, &mut keys, key, now);
    let Some(k) = keys.get_mut(key) else { return };
    let Some(i) = k.holds.iter().position(|h| h.id == id) else { return };
    let h = k.holds.swap_remove(i);
    k.held -= h.units;
    if k.holds.is_empty() {
        keys.remove(key);
    }
    let spent = spent.min(h.units);
    if spent > 0 {
        table.lock(table.shard_of(key)).settle(key, now, 0, spent, now);
    }
}
