//! `decide_one_at` (no Verdict allocated) decides exactly as `decide_at` with one check.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, SlidingLog, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, StoreError};

fn store(policy: Policy) -> MemoryStore {
    let options = MemoryOptions { max_keys: 64, shards: 4, ..MemoryOptions::default() };
    MemoryStore::new(vec![NamedPolicy { name: "p".into(), policy }], options, Arc::new(ManualClock::new(0)))
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

#[test]
fn single_check_errors_name_the_check() {
    let s = store(TokenBucket::new(3, 1.0).unwrap().into());
    let too_costly = s.decide_one_at(&Check { policy: 0, key: KeyHash([1; 16]), cost: 4 }, 0);
    assert!(matches!(too_costly, Err(StoreError::Cost { index: 0, .. })));
    let unknown = s.decide_one_at(&Check { policy: 3, key: KeyHash([1; 16]), cost: 1 }, 0);
    assert!(matches!(unknown, Err(StoreError::UnknownPolicy { index: 0, policy: 3 })));
}
