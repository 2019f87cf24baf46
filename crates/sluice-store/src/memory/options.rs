//! How a memory store is sized, and what a full shard does.

/// Upper bound on shards per policy.
pub(crate) const MAX_SHARDS: usize = 1 << 12;

/// The key bits a table uses to pick a shard (the low bits of the key's last 64, at most this
/// many): the summary's rows are indexed by the other bits, so keys of one shard spread over
/// its whole summary.
pub(crate) const SHARD_BITS: u32 = MAX_SHARDS.trailing_zeros();

/// The most rows a fold summary may have.
pub const MAX_FOLD_DEPTH: usize = 8;

/// What a full shard does with a new key once no fresh entry is left to drop.
///
/// Only [`WhenFull::Fold`] and [`WhenFull::Refuse`] keep the promise that no eviction ever
/// loosens a limit; [`WhenFull::Forget`] is an explicit opt-in that breaks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Evict the least recently used key (the oldest of [`LRU_SAMPLE`](crate::LRU_SAMPLE) sampled
    /// keys; exactly, in a shard of at most that many keys) and fold its state into the policy's
    /// bounded summary, from which a key absent from the table starts: at least as strict as
    /// the state it was evicted with, never looser (it may be stricter when keys share cells).
    /// The default.
    Fold(FoldSize),
    /// Refuse the new key: the request fails with [`StoreError::Full`](crate::StoreError::Full)
    /// (the gateway answers 503) until an entry is fresh and can be dropped.
    Refuse,
    /// Evict the least recently used key and forget its state. **May loosen limits**: a flood of
    /// new keys can evict a denied key, which then starts over as a fresh key. For callers that
    /// prefer that to refusals or early denials, knowingly.
    Forget,
}

impl Default for WhenFull {
    /// [`WhenFull::Fold`] with the default summary size.
    fn default() -> Self {
        WhenFull::Fold(FoldSize::default())
    }
}

impl WhenFull {
    /// `fold`, `refuse` or `forget`: the configuration's spelling.
    pub fn name(&self) -> &'static str {
        match self {
            WhenFull::Fold(_) => "fold",
            WhenFull::Refuse => "refuse",
            WhenFull::Forget => "forget",
        }
    }
}

/// The size of a policy's fold summary: `depth` rows of `width` cells. A key's cells are one per
/// row, picked by independent bits of its hash; its starting state is the least strict of them.
/// More rows make it less likely that every one of a key's cells holds a stricter key; more
/// cells per row make each cell shared by fewer keys.
///
/// The summary takes no memory until a live key is first evicted; then its cells are allocated
/// once and never grow (a bucket's cell is 8 bytes, a fixed window's 16, a sliding window
/// counter's 24, a sliding log's 80).
///
/// ```
/// use sluice_store::FoldSize;
/// let auto = FoldSize::default();
/// assert_eq!((auto.width, auto.depth), (None, 4));
/// // One row per 8 keys of the bound, four rows: half a cell per key.
/// assert_eq!(auto.cells_per_row(1_000_000), 125_000);
/// assert_eq!(FoldSize { width: Some(10), depth: 2 }.cells_per_row(1_000_000), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldSize {
    /// Cells per row for the whole policy (split over its shards, each shard's share rounded up
    /// to a power of two); `None` derives it from `max_keys` (one cell per 8 keys).
    pub width: Option<usize>,
    /// Rows, 1 to [`MAX_FOLD_DEPTH`].
    pub depth: usize,
}

impl Default for FoldSize {
    /// Width derived from `max_keys`, 4 rows.
    fn default() -> Self {
        Self { width: None, depth: 4 }
    }
}

impl FoldSize {
    /// Cells per row for a policy of `max_keys` keys (at least 1).
    pub fn cells_per_row(&self, max_keys: usize) -> usize {
        self.width.unwrap_or(max_keys / 8).max(1)
    }

    /// One shard's share, of `shards`: (log2 of its cells per row, rows). Rows take disjoint
    /// bit ranges of the 116 key bits the table leaves to them, so a shard has at most
    /// 2^(116 / depth) cells per row.
    pub(crate) fn per_shard(&self, max_keys: usize, shards: usize) -> (u32, usize) {
        let depth = self.depth.clamp(1, MAX_FOLD_DEPTH);
        let share = self.cells_per_row(max_keys).div_ceil(shards.max(1));
        let most = (128 - SHARD_BITS) / depth as u32;
        (share.next_power_of_two().trailing_zeros().min(most), depth)
    }
}

/// Sizing of a [`MemoryStore`](crate::MemoryStore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The most keys kept per policy (at least 1), split evenly across the shards.
    pub max_keys: usize,
    /// Shards per policy: rounded up to a power of two, at most 4096, and lowered so that each
    /// shard holds at least one key.
    pub shards: usize,
    /// What to do when a shard is full of live keys.
    pub when_full: WhenFull,
}

impl Default for MemoryOptions {
    /// 1,000,000 keys per policy in 64 shards, folding evicted keys into a summary.
    fn default() -> Self {
        Self { max_keys: 1_000_000, shards: 64, when_full: WhenFull::default() }
    }
}
