//! The decision engine behind a simulation. INTERIM: per-key core state in a map, until the
//! memory store lands; to be replaced by `sluice_store::MemoryStore`.

use std::collections::HashMap;

use sluice_core::{Decision, Nanos, Policy, State};
use sluice_store::KeyHash;

use crate::simulation::SimError;

pub(crate) struct Engine {
    policies: Vec<Policy>,
    states: Vec<HashMap<KeyHash, State>>,
}

impl Engine {
    pub(crate) fn new(policies: Vec<(String, Policy)>, _distinct_keys: usize) -> Self {
        let n = policies.len();
        Self {
            policies: policies.into_iter().map(|(_, p)| p).collect(),
            states: (0..n).map(|_| HashMap::new()).collect(),
        }
    }

    pub(crate) fn decide(&mut self, lane: usize, key: KeyHash, at: Nanos) -> Result<Decision, SimError> {
        let policy = self.policies[lane];
        let state = self.states[lane].entry(key).or_insert_with(|| policy.fresh_state());
        Ok(policy.check(state, at, 1).map_err(|source| sluice_store::StoreError::Cost { index: 0, source })?)
    }
}
