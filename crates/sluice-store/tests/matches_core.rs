//! Property: the memory store decides single-check requests exactly as the bare core algorithm
//! does on a map of states, whatever the keys, times and costs; and a store bounded so tightly
//! that it must drop entries still does, as long as it only drops fresh ones (or refuses).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, ManualClock, NANOS_PER_MILLI, Policy, SlidingLog, SlidingWindow, State,
    TokenBucket,
};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, StoreError, Verdict, WhenFull};

fn policy() -> impl Strategy<Value = Policy> {
    let ms = NANOS_PER_MILLI;
    prop_oneof![
        (1u64..20, 1u64..3_000).prop_map(move |(l, w)| FixedWindow::new(l, w * ms).unwrap().into()),
        (1u64..20, 1u64..3_000).prop_map(move |(l, w)| SlidingLog::new(l, w * ms).unwrap().into()),
        (1u64..20, 1u64..3_000).prop_map(move |(l, w)| SlidingWindow::new(l, w * ms).unwrap().into()),
        (1u64..20, 1u32..5_000).prop_map(|(c, r)| TokenBucket::new(c, f64::from(r) / 100.0).unwrap().into()),
        (1u64..20, 1u32..5_000, 0u64..20, any::<bool>()).prop_map(|(c, r, d, shape)| {
            let mode = if shape { LeakMode::Shape { delay: d % c } } else { LeakMode::Police };
            LeakyBucket::new(f64::from(r) / 100.0, c, mode).unwrap().into()
        }),
    ]
}

/// Steps: (key index, time step in ms, whether the step goes back, cost as a share of the limit).
fn steps() -> impl Strategy<Value = Vec<(u8, u64, bool, u8)>> {
    prop::collection::vec((0u8..6, 0u64..4_000, prop::bool::weighted(0.05), any::<u8>()), 1..200)
}

fn key(i: u8) -> KeyHash {
    let mut k = [i; 16];
    k[0] = i.wrapping_mul(37);
    KeyHash(k)
}

fn cost(limit: u64, share: u8) -> u64 {
    // Mostly 1, sometimes up to the limit.
    if share < 200 { 1 } else { 1 + u64::from(share - 200) % limit }
}

fn store(policy: Policy, options: MemoryOptions) -> MemoryStore {
    let named = NamedPolicy { name: "p".into(), policy };
    MemoryStore::new(vec![named], options, Arc::new(ManualClock::new(0)))
}

proptest! {
    #[test]
    fn single_checks_match_the_core(policy in policy(), steps in steps(), shards in 0usize..3) {
        let s = store(policy, MemoryOptions { shards: 1 << (shards * 3), ..MemoryOptions::default() });
        let mut states: HashMap<KeyHash, State> = HashMap::new();
        let mut now = 1_000_000 * NANOS_PER_MILLI;
        for (k, dt, back, share) in steps {
            // Now and then the clock steps back: the store passes the core's handling through.
            now = if back { now.saturating_sub(dt * NANOS_PER_MILLI) } else { now + dt * NANOS_PER_MILLI };
            let (key, cost) = (key(k), cost(policy.limit(), share));
            let state = states.entry(key).or_insert_with(|| policy.fresh_state());
            let d = policy.check(state, now, cost).unwrap();
            let got = s.decide_at(&[Check { policy: 0, key, cost }], now);
            prop_assert_eq!(got, Ok(Verdict::at(d.allowed, vec![d], now)));
        }
    }

    #[test]
    fn dropping_only_fresh_entries_changes_no_decision(policy in policy(), steps in steps()) {
        // Six keys, room for three, refusing rather than evicting a live key.
        let s = store(policy, MemoryOptions { max_keys: 3, shards: 1, when_full: WhenFull::Refuse });
        let mut states: HashMap<KeyHash, State> = HashMap::new();
        let mut now = 1_000_000 * NANOS_PER_MILLI;
        for (k, dt, _, share) in steps {
            now += dt * NANOS_PER_MILLI;
            let (key, cost) = (key(k), cost(policy.limit(), share));
            let mut state = states.get(&key).cloned().unwrap_or_else(|| policy.fresh_state());
            let d = policy.check(&mut state, now, cost).unwrap();
            match s.decide_at(&[Check { policy: 0, key, cost }], now) {
                Err(StoreError::Full { max_keys: 3 }) => {
                    // Only an admitted request for a key not held, while three live keys are held.
                    prop_assert!(d.allowed);
                    let live = states.values().filter(|st| !policy.is_fresh(st, now)).count();
                    prop_assert_eq!(live, 3);
                }
                got => {
                    prop_assert_eq!(got, Ok(Verdict::at(d.allowed, vec![d], now)));
                    states.insert(key, state);
                }
            }
        }
        prop_assert!(s.stats()[0].keys <= 3);
    }
}
