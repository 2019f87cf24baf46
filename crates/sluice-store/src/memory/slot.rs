//! How one key's entry is laid out in a shard: as small as the algorithm allows.
//!
//! The O(1) algorithms keep Copy states, stored in a `#[repr(C, packed(4))]` slot: the 16-byte key
//! hash, a 4-byte "last used" stamp and the state, with no padding (28 bytes for a bucket, 36 for a
//! fixed window, 44 for a sliding window counter). A packed field is only ever copied in or out,
//! never borrowed, which safe Rust allows. The sliding log's state owns a queue and is stored
//! unpacked.

/// One stored key: its hash, a last-used stamp and the algorithm's state.
pub(crate) trait Slot: Send + 'static {
    /// The algorithm's per-key state.
    type State;

    /// A slot for `key` holding `state`, last used at `stamp`.
    fn new(key: [u8; 16], stamp: u32, state: Self::State) -> Self;

    /// The key hash.
    fn key(&self) -> &[u8; 16];

    /// When the key was last used (a shard-local logical clock).
    fn stamp(&self) -> u32;

    /// Records a use.
    fn set_stamp(&mut self, stamp: u32);

    /// Runs `f` on the state.
    fn read<R>(&self, f: impl FnOnce(&Self::State) -> R) -> R;

    /// Runs `f` on the state and keeps what it leaves.
    fn write<R>(&mut self, f: impl FnOnce(&mut Self::State) -> R) -> R;

    /// Replaces the state.
    fn replace(&mut self, state: Self::State);
}

/// A slot for a Copy state, packed to 4-byte alignment.
#[repr(C, packed(4))]
pub(crate) struct PackedSlot<S: Copy> {
    key: [u8; 16],
    stamp: u32,
    state: S,
}

impl<S: Copy + Send + 'static> Slot for PackedSlot<S> {
    type State = S;

    fn new(key: [u8; 16], stamp: u32, state: S) -> Self {
        Self { key, stamp, state }
    }

    fn key(&self) -> &[u8; 16] {
        // Alignment 1: a reference into the packed struct is always aligned.
        &self.key
    }

    fn stamp(&self) -> u32 {
        self.stamp
    }

    fn set_stamp(&mut self, stamp: u32) {
        self.stamp = stamp;
    }

    fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        let state = self.state;
        f(&state)
    }

    fn write<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut state = self.state;
        let r = f(&mut state);
        self.state = state;
        r
    }

    fn replace(&mut self, state: S) {
        self.state = state;
    }
}

/// A slot for a state that owns memory (the sliding log's queue).
pub(crate) struct PlainSlot<S> {
    key: [u8; 16],
    stamp: u32,
    state: S,
}

impl<S: Send + 'static> Slot for PlainSlot<S> {
    type State = S;

    fn new(key: [u8; 16], stamp: u32, state: S) -> Self {
        Self { key, stamp, state }
    }

    fn key(&self) -> &[u8; 16] {
        &self.key
    }

    fn stamp(&self) -> u32 {
        self.stamp
    }

    fn set_stamp(&mut self, stamp: u32) {
        self.stamp = stamp;
    }

    fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.state)
    }

    fn write<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.state)
    }

    fn replace(&mut self, state: S) {
        self.state = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Algorithm, FixedWindowState, GcraState, SlidingWindowState, TokenBucket};

    #[test]
    fn packed_slots_have_no_padding() {
        assert_eq!(size_of::<PackedSlot<GcraState>>(), 16 + 4 + 8);
        assert_eq!(size_of::<PackedSlot<FixedWindowState>>(), 16 + 4 + 16);
        assert_eq!(size_of::<PackedSlot<SlidingWindowState>>(), 16 + 4 + 24);
        assert_eq!(align_of::<PackedSlot<SlidingWindowState>>(), 4);
    }

    #[test]
    fn packed_state_round_trips() {
        let tb = TokenBucket::new(3, 1.0).unwrap();
        let mut slot = PackedSlot::new([7; 16], 1, GcraState::default());
        let d = slot.write(|s| tb.check(s, 0, 2)).unwrap();
        assert!(d.allowed);
        // The charge stuck: one token left.
        assert_eq!(slot.read(|s| tb.peek(s, 0, 1)).unwrap().remaining, 0);
        assert!(!slot.read(|s| tb.peek(s, 0, 2)).unwrap().allowed);
        assert_eq!(slot.key(), &[7; 16]);
        slot.set_stamp(9);
        assert_eq!(slot.stamp(), 9);
    }
}
