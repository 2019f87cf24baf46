//! How many request bodies are being read at once for each client address, so that one client
//! trickling bodies cannot hold every slot of `max_in_flight`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Counts body reads in progress per client; an entry exists only while a read does, so the
/// map holds at most `max_in_flight` entries.
///
/// ```
/// use std::sync::Arc;
/// use sluice_gateway::body_reads::BodyReads;
/// let reads = Arc::new(BodyReads::new(2));
/// let who = "203.0.113.9".parse().unwrap();
/// let (a, b) = (reads.start(who), reads.start(who));
/// assert!(a.is_some() && b.is_some());
/// assert!(reads.start(who).is_none(), "a third at once is refused");
/// drop(a);
/// assert!(reads.start(who).is_some());
/// ```
#[derive(Debug)]
pub struct BodyReads {
    /// Reads at once per client.
    limit: usize,
    /// Reads in progress, by client key (the grouped address).
    active: Mutex<HashMap<IpAddr, usize>>,
}

/// One body read in progress; dropping it ends the read.
#[derive(Debug)]
pub struct BodyRead {
    /// The counts it belongs to.
    reads: Arc<BodyReads>,
    /// The client it counts for.
    who: IpAddr,
}

impl BodyReads {
    /// At most `limit` reads at once per client.
    pub fn new(limit: usize) -> Self {
        Self { limit, active: Mutex::new(HashMap::new()) }
    }

    /// Starts a read for `who`, or `None` when it already has `limit` in progress.
    pub fn start(self: &Arc<Self>, who: IpAddr) -> Option<BodyRead> {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let n = active.entry(who).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(BodyRead { reads: Arc::clone(self), who })
    }
}

impl Drop for BodyRead {
    fn drop(&mut self) {
        let mut active = self.reads.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = active.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                active.remove(&self.who);
            }
        }
    }
}
