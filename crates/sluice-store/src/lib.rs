//! # sluice-store
//!
//! The [`Store`] trait that every sluice state backend implements, the keyed [`KeyHasher`] that
//! turns identities into [`KeyHash`]es before anything is stored or logged, and the embedded
//! default: [`MemoryStore`], sharded, bounded, and atomic across a request's several limits.

mod key;
mod store;

pub use key::{KeyHash, KeyHasher};
pub use store::{Check, NamedPolicy, Store, StoreError, StoreFuture, Verdict};
