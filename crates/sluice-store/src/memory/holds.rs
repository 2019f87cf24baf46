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

use sluice_core::{Decision, Nanos, Policy};

use super::table::Table;
use crate::key::KeyHash;
use crate::lease::holdable;

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
    let charges: Vec<(Nanos, u64)> = k.holds.drain(..ended).map(|h| (h.until, h.units)).collect();
    k.held -= charges.iter().map(|c| c.1).sum::<u64>();
    // A shard that refuses new keys and has no room loses the charge of a key it no longer
    // held: that key starts from its summary, as any key evicted does.
    table.lock(table.shard_of(key)).charge_held(key, &charges, now);
    if k.holds.is_empty() {
        keys.remove(key);
    }
}

/// Units `key` holds now (after [`reap`]), and when its first hold ends.
pub(crate) fn held(keys: &HashMap<KeyHash, KeyHolds>, key: &KeyHash) -> (u64, Option<Nanos>) {
    keys.get(key).map_or((0, None), |k| (k.held, k.holds.iter().map(|h| h.until).min()))
}

/// The interval of a bucket a lease can hold (its nanoseconds a token); `None` for any other
/// policy.
pub(crate) fn interval(policy: &Policy) -> Option<Nanos> {
    match policy {
        Policy::TokenBucket(b) => Some(b.interval()),
        Policy::LeakyBucket(b) if holdable(policy) => Some(b.interval()),
        _ => None,
    }
}

/// A key's decision of `cost` beside `held` units, told as the key sees it (as the Redis store
/// tells it): `peeked` is the bucket's decision at `cost + held` when that is within the
/// capacity (`within`), else at `cost` alone (then denied: the units come back only when a
/// hold ends, at `first_end`). `remaining` is what is left beside the holds; `reset_after` is
/// on the bucket's own time, before this request (a hold) or after it (a decision).
pub(crate) fn beside(
    peeked: Decision,
    within: bool,
    cost: u64,
    held: u64,
    t: Nanos,
    first_end: Option<Nanos>,
    now: Nanos,
) -> Decision {
    if within {
        return if peeked.allowed {
            // reset_after as the charge of `cost` alone leaves it.
            Decision { reset_after: peeked.reset_after - held * t, ..peeked }
        } else {
            Decision { remaining: peeked.remaining.saturating_sub(held), ..peeked }
        };
    }
    // The bucket's own backlog and room, from its decision at `cost`.
    let (backlog, room) = if peeked.allowed {
        (peeked.reset_after - cost * t, peeked.remaining + cost)
    } else {
        (peeked.reset_after, peeked.remaining)
    };
    let wait = first_end.map_or(1, |end| end.saturating_sub(now).max(1));
    Decision {
        allowed: false,
        limit: peeked.limit,
        remaining: room.saturating_sub(held),
        reset_after: backlog,
        retry_after: wait,
        delay: 0,
    }
}

/// Sets `units` of `key` apart until `now + life`, if the bucket has room for them beside its
/// holds. Returns the id (0 when refused) and the decision.
pub(crate) fn hold(
    table: &Table,
    (capacity, t): (u64, Nanos),
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
    let within = units + held <= capacity;
    // The caller checked the units against the capacity: the peek cannot fail.
    let peeked = table.lock(table.shard_of(key)).peek(key, now, if within { units + held } else { units });
    let Ok(peeked) = peeked else {
        let refused =
            Decision { allowed: false, limit: capacity, remaining: 0, reset_after: 0, retry_after: 0, delay: 0 };
        return (0, refused, now);
    };
    let d = beside(peeked, within, units, held, t, first_end, now);
    // A hold leaves the bucket's time alone: reset_after as before it.
    let d = if d.allowed { Decision { reset_after: d.reset_after - units * t, ..d } } else { d };
    if !d.allowed {
        return (0, d, now);
    }
    let id = table.holds.last_id.fetch_add(1, Ordering::Relaxed) + 1;
    // A hold of no units holds nothing: it has an id, and no record.
    if units > 0 {
        let k = keys.entry(*key).or_default();
        k.held += units;
        k.holds.push(Held { id, units, until: now.saturating_add(life) });
    }
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
        table.lock(table.shard_of(key)).charge_held(key, &[(now, spent)], now);
    }
}
