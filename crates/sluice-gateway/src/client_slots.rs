//! How many of something each client holds at once — requests in flight, body reads — so that
//! one client cannot take every slot of `max_in_flight`.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::HashTable;

/// Shards of the per-client counts: the worker threads take different locks for different
/// clients.
const SHARDS: usize = 16;
const _: () = assert!(SHARDS.is_power_of_two(), "a shard is picked by the hash's top bits");

/// Slots held now, in all and per client. A client has an entry only while it holds a slot, so
/// the counts take memory for the clients of the requests in progress, no more.
///
/// ```
/// use std::sync::Arc;
/// use sluice_gateway::client_slots::ClientSlots;
/// let slots = Arc::new(ClientSlots::new());
/// let who = "203.0.113.9".parse().unwrap();
/// let (a, b) = (slots.start(who, 2), slots.start(who, 2));
/// assert!(a.is_some() && b.is_some());
/// assert!(slots.start(who, 2).is_none(), "a third at once is refused");
/// assert!(slots.start("203.0.113.10".parse().unwrap(), 2).is_some(), "another client has its own");
/// drop(a);
/// assert!(slots.start(who, 2).is_some());
/// ```
#[derive(Debug)]
pub struct ClientSlots {
    /// Slots held, every client together.
    total: AtomicUsize,
    /// Slots held per client (the grouped address, and how many), in the shard its hash picks.
    /// A table keyed by the one hash [`ClientSlots::hash`] makes: a request hashes its client
    /// once, and its slot keeps the hash for giving the slot back.
    shards: [Mutex<HashTable<(IpAddr, usize)>>; SHARDS],
    /// Hashes clients: seeded per process, so no client chooses whose lock or bucket it shares.
    pick: RandomState,
}

/// One slot held; dropping it gives it back (to the total, and to its client's count once it
/// was claimed for one).
#[derive(Debug)]
pub struct Slot {
    /// The counts it belongs to.
    slots: Arc<ClientSlots>,
    /// The client it counts for, once claimed, with its hash.
    who: Option<(IpAddr, u64)>,
}

impl Default for ClientSlots {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientSlots {
    /// No slot held.
    pub fn new() -> Self {
        Self { total: AtomicUsize::new(0), shards: Default::default(), pick: RandomState::new() }
    }

    /// Takes a slot for a client not known yet, counted in the total only; returns it with the
    /// total held before it. [`ClientSlots::claim`] counts it for its client.
    pub fn enter(self: &Arc<Self>) -> (Slot, usize) {
        let before = self.total.fetch_add(1, Ordering::Relaxed);
        (Slot { slots: Arc::clone(self), who: None }, before)
    }

    /// Counts `slot` (unclaimed, taken from these counts) for `who`, unless `who` already holds
    /// `limit`: then false, and `slot` stays unclaimed.
    pub fn claim(&self, slot: &mut Slot, who: IpAddr, limit: usize) -> bool {
        debug_assert!(slot.who.is_none() && std::ptr::eq(Arc::as_ptr(&slot.slots), self));
        let hash = self.hash(who);
        let mut held = self.shard(hash);
        match held.find_mut(hash, |(ip, _)| *ip == who) {
            Some((_, n)) if *n >= limit => return false,
            Some((_, n)) => *n += 1,
            None if limit == 0 => return false,
            None => {
                held.insert_unique(hash, (who, 1), |(ip, _)| self.hash(*ip));
            }
        }
        slot.who = Some((who, hash));
        true
    }

    /// A slot for `who`, or `None` when it already holds `limit`.
    pub fn start(self: &Arc<Self>, who: IpAddr, limit: usize) -> Option<Slot> {
        let (mut slot, _) = self.enter();
        self.claim(&mut slot, who, limit).then_some(slot)
    }

    /// Slots held now, every client together.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Slots `who` holds now.
    pub fn held_by(&self, who: IpAddr) -> usize {
        let hash = self.hash(who);
        self.shard(hash).find(hash, |(ip, _)| *ip == who).map_or(0, |(_, n)| *n)
    }

    /// Clients holding a slot now (the entries kept).
    pub fn clients(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len()).sum()
    }

    fn hash(&self, who: IpAddr) -> u64 {
        self.pick.hash_one(who)
    }

    /// The shard of a client whose hash is `hash`: its top bits (the table inside uses the low
    /// ones, so the two choices do not go together).
    fn shard(&self, hash: u64) -> MutexGuard<'_, HashTable<(IpAddr, usize)>> {
        let i = (hash >> (64 - SHARDS.trailing_zeros())) as usize;
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((who, hash)) = self.who {
            let mut held = self.slots.shard(hash);
            if let Ok(mut entry) = held.find_entry(hash, |(ip, _)| *ip == who) {
                entry.get_mut().1 -= 1;
                if entry.get().1 == 0 {
                    entry.remove();
                }
            }
        }
        self.slots.total.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_go_away_when_their_last_slot_does() {
        let slots = Arc::new(ClientSlots::new());
        let held: Vec<Slot> = (0..200u8)
            .flat_map(|i| {
                let who = IpAddr::from([198, 51, 100, i]);
                [slots.start(who, 2).unwrap(), slots.start(who, 2).unwrap()]
            })
            .collect();
        assert_eq!((slots.total(), slots.clients()), (400, 200));
        assert_eq!(slots.held_by(IpAddr::from([198, 51, 100, 7])), 2);
        // A refused claim leaves no entry behind, and its slot still counts in the total.
        let (mut refused, before) = slots.enter();
        assert_eq!(before, 400);
        assert!(!slots.claim(&mut refused, IpAddr::from([198, 51, 100, 7]), 2));
        assert!(!slots.claim(&mut refused, IpAddr::from([203, 0, 113, 1]), 0));
        assert_eq!((slots.total(), slots.clients()), (401, 200));
        drop(refused);
        drop(held);
        assert_eq!((slots.total(), slots.clients()), (0, 0));
    }
}
