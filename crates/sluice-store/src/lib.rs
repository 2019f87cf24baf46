//! # sluice-store
//!
//! The [`Store`] trait that every sluice state backend implements, the keyed [`KeyHasher`] that
//! turns identities into [`KeyHash`]es before anything is stored or logged, and the embedded
//! default: [`MemoryStore`], sharded, bounded, and atomic across a request's several limits.
//! With the `conformance` feature (for tests: stores enable it in their dev-dependencies),
//! `conformance` holds the suite every store must pass.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::{FixedWindow, ManualClock, Policy, NANOS_PER_SEC};
//! use sluice_store::{Check, KeyHasher, MemoryOptions, MemoryStore, NamedPolicy};
//!
//! let per_ip = NamedPolicy { name: "per-ip".into(), policy: Policy::from(FixedWindow::new(2, NANOS_PER_SEC).unwrap()) };
//! let clock = Arc::new(ManualClock::new(0));
//! let store = MemoryStore::new(vec![per_ip], MemoryOptions::default(), clock.clone());
//! let ip = KeyHasher::random().hash(&[b"ip", b"198.51.100.4"]);
//! let request = [Check { policy: 0, key: ip, cost: 1 }];
//!
//! assert!(store.decide_now(&request).unwrap().allowed);
//! assert!(store.decide_now(&request).unwrap().allowed);
//! let denied = store.decide_now(&request).unwrap();
//! assert!(!denied.allowed);
//! assert_eq!(denied.decisions[0].retry_after, NANOS_PER_SEC);
//! clock.advance(NANOS_PER_SEC); // the next window
//! assert!(store.decide_now(&request).unwrap().allowed);
//! ```

#[cfg(feature = "conformance")]
pub mod conformance;
mod key;
mod lease;
mod memory;
mod store;

pub use key::{KeyHash, KeyHasher, is_key_name};
pub use lease::{LeaseOptions, LeasedStore, holdable, leasable};
pub use memory::{
    Boot, CONTINUE_WITHIN, FRESH_SCAN, FoldSize, LRU_SAMPLE, Loaded, MAX_FOLD_DEPTH, MemoryOptions, MemoryStore,
    Moment, PolicyRestore, PolicyStats, Restored, SNAPSHOT_VERSION, SnapshotError, UPTIME_RESOLUTION, WhenFull,
    Written,
};
pub use store::{
    Check, Degraded, Hold, HoldFuture, KeyStats, LeaseStats, NamedPolicy, Reported, ReportedFuture, Settle,
    SettleFuture, Store, StoreError, StoreFuture, Verdict, validate_checks, validate_settles,
};
