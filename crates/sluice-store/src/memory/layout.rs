//! Which slot, storage and fold cell each algorithm's keys get, and the conversions between its
//! state and the core's [`State`] enum.

use sluice_core::{
    Algorithm, FixedWindow, FixedWindowState, GcraState, LeakyBucket, SlidingLog, SlidingLogState, SlidingWindow,
    SlidingWindowState, State, TokenBucket,
};

use super::slot::{PackedSlot, PlainSlot, Slot};
use super::snapshot::cells::Persist;
use super::storage::{Dense, Storage};
use super::summary::{BucketCell, CounterCell, LogCell, Summary, WindowCell};

/// An algorithm the memory store can keep: its slot and shard layouts, and the conversions
/// between its state and the core's [`State`] enum (used for a request's working copies).
pub(crate) trait Stored: Algorithm + Copy + Send + 'static {
    /// How one key is laid out.
    type Slot: Slot<State = Self::State>;

    /// How a shard holds its slots.
    type Storage: Storage<Self::Slot>;

    /// A cell of the summary evicted keys are folded into (and of the snapshot keys are written
    /// to).
    type Cell: Summary<Self> + Persist<Self>;

    /// The state as the core's enum.
    fn wrap(state: Self::State) -> State;

    /// The state back from the core's enum; `None` if it belongs to another algorithm.
    fn unwrap(state: State) -> Option<Self::State>;
}

macro_rules! stored {
    ($alg:ty, $slot:ident, $storage:ident, $state:ty, $variant:ident, $cell:ty) => {
        impl Stored for $alg {
            type Slot = $slot<$state>;
            type Storage = $storage<$slot<$state>>;
            type Cell = $cell;

            fn wrap(state: $state) -> State {
                State::$variant(state)
            }

            fn unwrap(state: State) -> Option<$state> {
                match state {
                    State::$variant(s) => Some(s),
                    _ => None,
                }
            }
        }
    };
}

// Packed slots: 28 bytes for a bucket, 36 for a fixed window, 44 for a sliding window counter.
stored!(TokenBucket, PackedSlot, Dense, GcraState, Gcra, BucketCell);
stored!(LeakyBucket, PackedSlot, Dense, GcraState, Gcra, BucketCell);
stored!(FixedWindow, PackedSlot, Dense, FixedWindowState, FixedWindow, WindowCell);
stored!(SlidingWindow, PackedSlot, Dense, SlidingWindowState, SlidingWindow, CounterCell);
stored!(SlidingLog, PlainSlot, Dense, SlidingLogState, SlidingLog, LogCell);
