//! The store's shortcuts decide exactly as its general path: `decide_one_at` (no Verdict
//! allocated) as `decide_at` with one check, `decide_at_once` (nothing awaited) as
//! `decide_reported`.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, SlidingLog, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, Store, StoreError};

fn store(policy: Policy) -> MemoryStore {
    stores(vec![policy], Arc::new(ManualClock::new(0)))
}

fn stores(policies: Vec<Policy>, clock: Arc<ManualClock>) -> MemoryStore {
    let options = MemoryOptions { max_keys: 64, shards: 4, ..MemoryOptions::default() };
    let named = policies.into_iter().enumerate().map(|(i, policy)| NamedPolicy { name: format!("p{i}"), policy });
    MemoryStore::new(named.collect(), options, clock)
}

proptest! {
    #[test]
    fn single_check_path_matches_the_general_one(
        which in 0usize..3,
        steps in proptest::collection::vec((0u8..8, 0u64..400_000_000, 1u64..3), 1..200),
    ) {
        let policy: Policy = match which {
            0 => TokenBucket::new(3, 5.0).unwrap().into(),
            1 => FixedWindow::new(3, NANOS_PER_SEC).unwrap().into(),
            _ => SlidingLog::new(3, NANOS_PER_SEC).unwrap().into(),
        };
        let (a, b) = (store(policy), store(policy));
        let mut now = 0;
        for (key, gap, cost) in steps {
            now += gap;
            let check = Check { policy: 0, key: KeyHash([key; 16]), cost };
            let one = a.decide_one_at(&check, now);
            let general = b.decide_at(&[check], now).map(|v| v.decisions[0]);
            prop_assert_eq!(one, general);
        }
    }
}

proptest! {
    #[test]
    fn deciding_at_once_answers_as_the_awaited_path(
        steps in proptest::collection::vec(
            (proptest::collection::vec((0usize..4, 0u8..4, 1u64..4), 0..4), 0u64..400_000_000),
            1..150,
        ),
    ) {
        let policies: Vec<Policy> = vec![
            TokenBucket::new(3, 5.0).unwrap().into(),
            FixedWindow::new(3, NANOS_PER_SEC).unwrap().into(),
            SlidingLog::new(3, NANOS_PER_SEC).unwrap().into(),
        ];
        // One clock for both: each store reads the same "now" for the same request. Policy 3
        // does not exist: its errors must be the same too.
        let clock = Arc::new(ManualClock::new(0));
        let (a, b) = (stores(policies.clone(), clock.clone()), stores(policies, clock.clone()));
        for (request, gap) in steps {
            clock.advance(gap);
            let checks: Vec<Check> =
                request.iter().map(|&(policy, key, cost)| Check { policy, key: KeyHash([key; 16]), cost }).collect();
            let at_once = a.decide_at_once(&checks).expect("the memory store decides at once");
            let awaited = sluice_store::conformance::block_on(b.decide_reported(&checks, None));
            prop_assert_eq!(at_once, awaited);
        }
    }
}

#[test]
fn single_check_errors_name_the_check() {
    let s = store(TokenBucket::new(3, 1.0).unwrap().into());
    let too_costly = s.decide_one_at(&Check { policy: 0, key: KeyHash([1; 16]), cost: 4 }, 0);
    assert!(matches!(too_costly, Err(StoreError::Cost { index: 0, .. })));
    let unknown = s.decide_one_at(&Check { policy: 3, key: KeyHash([1; 16]), cost: 1 }, 0);
    assert!(matches!(unknown, Err(StoreError::UnknownPolicy { index: 0, policy: 3 })));
}
