//! Snapshots: the memory store's state in a file, so that a restarted process keeps its limits.
//!
//! ## What is written
//!
//! Every entry that is not fresh and every live cell of each policy's fold summary (without
//! them, keys evicted into the summary would come back fresh). Each state is written as its fold
//! cell ([`cells`]), which is at least as strict as the state: exact for the buckets and the
//! fixed window; for the sliding window counter, the previous window's count as an upper bound;
//! for the sliding log, each entry moved to the end of its eighth of the window (a restored log
//! may deny up to an eighth of a window longer). Entries are written least recently used first.
//!
//! ## Time
//!
//! States hold times of the store's clock. The file records the clocks at the moment of writing
//! ([`Moment`]); on reading, every time is moved into the new clock so that the time that surely
//! passed between the two moments ([`Moment::elapsed_since`]: the wall clock's difference, never
//! negative, capped by the time since boot on one boot) counts as passed: a bucket has refilled
//! by it, a window may have ended. Never more: when the clocks disagree, a state is aged less,
//! which is stricter. Two system clocks (each anchored to the wall clock) agree to within their
//! drift: then the new store continues the writer's clock (offset by at most
//! [`CONTINUE_WITHIN`]) and every state keeps its times, exactly. Clocks further apart are not
//! one clock: every state is moved, and since windows are aligned to the clock's epoch, a move is
//! rounded up to the window (to an eighth of it for the sliding log), so a window still counting
//! at the restart may count until the end of the next one, never shorter.
//!
//! ## What is checked
//!
//! The file is versioned ([`SNAPSHOT_VERSION`]) and ends with a checksum keyed from the key
//! secret ([`seal`]), and it carries a fingerprint of the secret and of every policy. A file that
//! is too large for the store's bounds, not a snapshot, of another version, written under another
//! key secret, truncated, inconsistent or failing its checksum is skipped whole
//! ([`SnapshotError`]): the store starts empty, as with no file. A policy whose name or
//! parameters changed starts empty (a changed policy is a new policy, as on a reload); the others
//! keep their state. Reading never holds more than the store's own bounds: entries go into the
//! bounded store as they are read (a full shard evicts as usual), a summary of another size is
//! joined into one cell rather than allocated, every count and length is checked before use, and
//! nothing a cell says is trusted beyond what a writer could have written (a count beyond the
//! limit, a time later than the capture allows, a time off the window grid refuse the file). A
//! state read back is rebuilt with the core's own `check` from a fresh state, so it is a state
//! the algorithm can hold; the worst a file that passes every check can do is deny keys until
//! their windows end.
//!
//! ## Format (version 1, little-endian)
//!
//! ```text
//! "sluiceSN" version:u32 secret-fingerprint:[16]
//! moment: clock:u64 wall:u64 has-boot:u8 [boot-id:[16] uptime:u64]
//! policies:u32, each:
//!   name-len:u16 name fingerprint:[16] cell-bytes:u16 shards:u32 fold:u8 [bits:u8 depth:u8]
//!   per shard: captured:u64 entries:u32 (key:[16] cell)*
//!              summary:u8 [bits:u8 depth:u8 since:u64 cells:u32 (index:u32 cell)*]
//! checksum:[16]
//! ```

pub(crate) mod cells;
mod file;
mod moment;
mod seal;
mod stream;
#[cfg(test)]
mod tests;

use std::io::{self, BufReader, BufWriter, Read};
use std::path::Path;
use std::sync::Arc;

use sluice_core::{Clock, Nanos};
use thiserror::Error;

use super::options::{MAX_FOLD_DEPTH, MAX_SHARDS, SHARD_BITS};
use super::shard::Imported;
use super::table::Table;
use crate::key::{KeyHash, KeyHasher};
use crate::store::NamedPolicy;
use cells::Frame;
use stream::{Sink, Source};

pub use moment::{Boot, Moment, UPTIME_RESOLUTION};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// The first bytes of every snapshot.
const MAGIC: [u8; 8] = *b"sluiceSN";

/// Clocks that place the writer's "now" within this of each other are taken for one clock
/// continued (nanoseconds): two system clocks, each anchored to the wall clock, disagree by their
/// drift, far less. Moving states by such a sliver would put every window still counting off the
/// grid, and rounding up would keep it counting a whole window longer.
pub const CONTINUE_WITHIN: u64 = 1_000_000_000;

/// The most policies a snapshot may list.
const MAX_POLICIES: u32 = 1 << 16;

/// The longest a write may take between its first and last shard: a file claiming more is
/// refused, and no state it holds can bind a key for longer than this and its window.
const MAX_WRITE: Nanos = 600 * 1_000_000_000;

/// Why a snapshot could not be written or was skipped.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// Reading or writing the file failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file is larger than any snapshot of this store's bounds.
    #[error("the file has {size} bytes, more than the {bound} a snapshot of this store's bounds can take")]
    TooLarge {
        /// The file's length.
        size: u64,
        /// The bound.
        bound: u64,
    },
    /// The file does not start as a snapshot.
    #[error("not a sluice snapshot")]
    NotASnapshot,
    /// The file is of another format version.
    #[error("written in snapshot format {found}; this sluice reads format {SNAPSHOT_VERSION}")]
    Version {
        /// The version the file says.
        found: u32,
    },
    /// The file was written under another key secret (or its header is damaged).
    #[error("written with another key secret")]
    OtherSecret,
    /// The file ends early.
    #[error("truncated")]
    Truncated,
    /// The file says something no writer writes.
    #[error("corrupt: {0}")]
    Corrupt(&'static str),
    /// The file's checksum does not match its contents.
    #[error("its checksum does not match (the file was changed or damaged)")]
    Checksum,
}

/// What a snapshot write wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Keys written (entries that were not fresh).
    pub keys: u64,
    /// Live fold summary cells written.
    pub cells: u64,
    /// States left out because they were recorded at times later than the store's clock
    /// (explicit times only; a store deciding on its own clock has none).
    pub unwritable: u64,
    /// The file's length.
    pub bytes: u64,
}

/// What reading a snapshot did.
#[derive(Debug)]
pub enum Restored {
    /// No file at the path: the store starts empty.
    Missing,
    /// The file was read; see each policy.
    Loaded(Loaded),
    /// The file was skipped whole, for this reason: the store starts empty.
    Skipped(SnapshotError),
}

/// A snapshot read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// How much every state was aged: the time that surely passed since the write.
    pub elapsed: Nanos,
    /// How far behind the clock it was given the store's clock now reads (ahead when negative):
    /// the writer's clock continued, when the two agreed to within [`CONTINUE_WITHIN`]; 0 when
    /// the states were moved into the given clock instead.
    pub clock_offset: i64,
    /// Per policy of the store, in order.
    pub policies: Vec<PolicyRestore>,
    /// Policies of the snapshot that no policy of the store matches (renamed, changed or
    /// removed): their state was not restored.
    pub left_out: Vec<String>,
}

/// What one policy got back from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRestore {
    /// The policy's name.
    pub name: String,
    /// Whether the snapshot held this policy with the same name and parameters; if not, it
    /// starts empty.
    pub restored: bool,
    /// Keys stored again (not fresh by now).
    pub keys: u64,
    /// Fold summary cells put back.
    pub cells: u64,
    /// Keys a full store refused ([`crate::WhenFull::Refuse`]), or summary cells it has nowhere
    /// to put (a store that does not fold): their state is lost.
    pub dropped: u64,
}

/// Writes the state of `tables` (the store's policies, in order) to `path`, atomically.
pub(crate) fn write(
    tables: &[Arc<Table>],
    policies: &[NamedPolicy],
    clock: &dyn Clock,
    path: &Path,
    secret: &KeyHasher,
    moment: Moment,
) -> Result<Written, SnapshotError> {
    let written = file::replace(path, |f| {
        let mut out = Sink::new(BufWriter::with_capacity(1 << 16, f), seal::checksum(secret));
        let mut done = Written::default();
        out.bytes(&MAGIC)?;
        out.u32(SNAPSHOT_VERSION)?;
        out.bytes(&seal::secret_fingerprint(secret))?;
        out.u64(moment.clock)?;
        out.u64(moment.wall)?;
        match moment.boot {
            None => out.u8(0)?,
            Some(boot) => {
                out.u8(1)?;
                out.bytes(&boot.id)?;
                out.u64(boot.uptime)?;
            }
        }
        out.u32(u32::try_from(tables.len()).map_err(|_| io::Error::other("too many policies"))?)?;
        let mut block = Vec::new();
        for (policy, table) in policies.iter().zip(tables) {
            let name = policy.name.as_bytes();
            out.u16(u16::try_from(name.len()).map_err(|_| io::Error::other("a policy name too long"))?)?;
            out.bytes(name)?;
            out.bytes(&seal::policy_fingerprint(secret, policy))?;
            let first = table.lock(0);
            let (cell_bytes, fold) = (first.cell_bytes(), first.fold_layout());
            drop(first);
            out.u16(cell_bytes as u16)?;
            out.u32(table.shards() as u32)?;
            match fold {
                None => out.u8(0)?,
                Some((bits, depth)) => out.bytes(&[1, bits as u8, depth as u8])?,
            }
            for i in 0..table.shards() {
                block.clear();
                // One shard locked at a time, for as long as it takes to encode it.
                let exported = table.lock(i).export(clock.now().max(moment.clock), &mut block);
                out.bytes(&block)?;
                done.keys += exported.entries;
                done.cells += exported.cells;
                done.unwritable += exported.unwritable;
            }
        }
        let (w, bytes) = out.finish()?;
        w.into_inner().map_err(|e| e.into_error())?;
        done.bytes = bytes;
        Ok(done)
    })?;
    Ok(written)
}

/// The largest snapshot a store of these tables reads: four times what its bounds can fill (a
/// snapshot of a store whose `max_keys` was larger is read as long as it was at most 4x).
fn bound(tables: &[Arc<Table>]) -> u64 {
    let per_table = |t: &Arc<Table>| -> u128 {
        let first = t.lock(0);
        let (cell, fold) = (first.cell_bytes() as u128, first.fold_layout());
        drop(first);
        let shards = t.shards() as u128;
        let fold_cells = fold.map_or(0, |(bits, depth)| shards * ((depth as u128) << bits));
        4 * (t.max_keys as u128 * (16 + cell) + fold_cells * (4 + cell) + shards * 64 + 2_048)
    };
    let total: u128 = (1u128 << 20) + tables.iter().map(per_table).sum::<u128>();
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The policy fields of a snapshot.
struct PolicyHeader {
    name: String,
    fingerprint: [u8; 16],
    cell_bytes: usize,
    shards: usize,
    fold: Option<(u32, usize)>,
}

/// A summary's size from its two bytes, if one a writer could have had.
fn fold_size(bits: u8, depth: u8) -> Result<(u32, usize), SnapshotError> {
    let (bits, depth) = (u32::from(bits), usize::from(depth));
    if !(1..=MAX_FOLD_DEPTH).contains(&depth) || bits * depth as u32 > 128 - SHARD_BITS {
        return Err(SnapshotError::Corrupt("a summary size no store has"));
    }
    Ok((bits, depth))
}

fn policy_header<R: Read>(src: &mut Source<R>) -> Result<PolicyHeader, SnapshotError> {
    let len = usize::from(src.u16()?);
    let name = String::from_utf8_lossy(src.bytes(len)?).into_owned();
    let fingerprint = src.key()?;
    let cell_bytes = usize::from(src.u16()?);
    if cell_bytes == 0 || cell_bytes > Source::<R>::MAX_PIECE {
        return Err(SnapshotError::Corrupt("a cell size no algorithm has"));
    }
    let shards = src.u32()? as usize;
    if !(1..=MAX_SHARDS).contains(&shards) || !shards.is_power_of_two() {
        return Err(SnapshotError::Corrupt("a shard count no store has"));
    }
    let fold = match src.u8()? {
        0 => None,
        1 => Some(fold_size(src.u8()?, src.u8()?)?),
        _ => return Err(SnapshotError::Corrupt("a summary flag that is neither 0 nor 1")),
    };
    Ok(PolicyHeader { name, fingerprint, cell_bytes, shards, fold })
}

/// Reads the snapshot at `path` into `tables` (empty, of the store's `policies`). `Ok(None)`:
/// no file. On `Err` the tables may hold part of the file and must be dropped.
pub(crate) fn restore(
    tables: &[Arc<Table>],
    policies: &[NamedPolicy],
    path: &Path,
    secret: &KeyHasher,
    moment: Moment,
) -> Result<Option<Loaded>, SnapshotError> {
    let Some((f, size)) = file::open(path)? else { return Ok(None) };
    let bound = bound(tables);
    if size > bound {
        return Err(SnapshotError::TooLarge { size, bound });
    }
    // Taken to the bound, should the file grow while it is read.
    let mut src = Source::new(BufReader::with_capacity(1 << 16, f.take(bound)), seal::checksum(secret));
    if src.bytes(MAGIC.len()).map_err(|_| SnapshotError::NotASnapshot)? != MAGIC {
        return Err(SnapshotError::NotASnapshot);
    }
    let version = src.u32()?;
    if version != SNAPSHOT_VERSION {
        return Err(SnapshotError::Version { found: version });
    }
    if src.key()? != seal::secret_fingerprint(secret) {
        return Err(SnapshotError::OtherSecret);
    }
    let (clock, wall) = (src.u64()?, src.u64()?);
    let boot = match src.u8()? {
        0 => None,
        1 => Some(Boot { id: src.key()?, uptime: src.u64()? }),
        _ => return Err(SnapshotError::Corrupt("a boot flag that is neither 0 nor 1")),
    };
    let written = Moment { clock, wall, boot };
    let elapsed = moment.elapsed_since(&written);
    // Where the writer's clock would read now, as this clock reads it: `shift` later. Clocks
    // that agree to within `CONTINUE_WITHIN` (two system clocks, each following the wall clock)
    // are taken as one: the store continues the writer's clock and states keep their times,
    // exactly; others are moved (rounded to their grid).
    let shift = i128::from(moment.clock) - i128::from(written.clock) - i128::from(elapsed);
    let (shift, clock_offset, now) = match i64::try_from(shift) {
        Ok(offset) if offset.unsigned_abs() <= CONTINUE_WITHIN => {
            (0, offset, moment.clock.saturating_add_signed(-offset))
        }
        _ => (shift, 0, moment.clock),
    };

    let count = src.u32()?;
    if count > MAX_POLICIES {
        return Err(SnapshotError::Corrupt("more policies than any store has"));
    }
    let mut report: Vec<PolicyRestore> = policies
        .iter()
        .map(|p| PolicyRestore { name: p.name.clone(), restored: false, keys: 0, cells: 0, dropped: 0 })
        .collect();
    let mut left_out = Vec::new();
    for _ in 0..count {
        let header = policy_header(&mut src)?;
        let target = (0..policies.len()).find(|&i| {
            !report[i].restored
                && policies[i].name == header.name
                && seal::policy_fingerprint(secret, &policies[i]) == header.fingerprint
        });
        let table = match target {
            Some(i) => {
                if tables[i].lock(0).cell_bytes() != header.cell_bytes {
                    return Err(SnapshotError::Corrupt("a policy's cells of another size than its algorithm's"));
                }
                report[i].restored = true;
                Some((&tables[i], i))
            }
            None => {
                left_out.push(header.name.clone());
                None
            }
        };
        let mut policy = PolicyRestore { name: header.name.clone(), restored: true, keys: 0, cells: 0, dropped: 0 };
        restore_policy(&mut src, &header, table.map(|(t, _)| t), &written, shift, now, &mut policy)?;
        if let Some((_, i)) = table {
            report[i] = policy;
        }
    }
    src.finish()?;
    Ok(Some(Loaded { elapsed, clock_offset, policies: report, left_out }))
}

/// Reads one policy's shards; puts their state into `table` when the store has the policy.
fn restore_policy<R: Read>(
    src: &mut Source<R>,
    header: &PolicyHeader,
    table: Option<&Arc<Table>>,
    written: &Moment,
    shift: i128,
    now: Nanos,
    report: &mut PolicyRestore,
) -> Result<(), SnapshotError> {
    let corrupt = SnapshotError::Corrupt;
    // Cells go back in place only into a summary of the same layout; otherwise they are joined
    // into one cell that every key starts from (stricter, never looser).
    let in_place = table.is_some_and(|t| t.shards() == header.shards && t.lock(0).fold_layout() == header.fold);
    let mut joined = Vec::new();
    let mut latest_fold = 0;
    let mut frame = Frame { captured: written.clock, shift, now };
    for block in 0..header.shards {
        frame.captured = src.u64()?;
        if frame.captured < written.clock || frame.captured - written.clock > MAX_WRITE {
            return Err(corrupt("a shard captured before the snapshot began, or ten minutes after"));
        }
        for _ in 0..src.u32()? {
            let key = KeyHash(src.key()?);
            let cell = src.bytes(header.cell_bytes)?;
            let Some(t) = table else { continue };
            match t.lock(t.shard_of(&key)).import_entry(&key, cell, &frame).map_err(corrupt)? {
                Imported::Stored => report.keys += 1,
                Imported::Fresh => {}
                Imported::Refused => report.dropped += 1,
            }
        }
        match src.u8()? {
            0 => continue,
            1 => {}
            _ => return Err(corrupt("a summary flag that is neither 0 nor 1")),
        }
        let layout = fold_size(src.u8()?, src.u8()?)?;
        if Some(layout) != header.fold {
            return Err(corrupt("a shard's summary of another size than its policy's"));
        }
        let since = src.u64()?;
        if since > frame.captured {
            return Err(corrupt("a summary folded after its capture"));
        }
        latest_fold = latest_fold.max(since);
        let size = (layout.1 as u128) << layout.0;
        let cells = src.u32()?;
        if u128::from(cells) > size {
            return Err(corrupt("more summary cells than the summary has"));
        }
        for _ in 0..cells {
            let index = src.u32()?;
            if u128::from(index) >= size {
                return Err(corrupt("a summary cell out of range"));
            }
            let cell = src.bytes(header.cell_bytes)?;
            let Some(t) = table else { continue };
            if in_place {
                if t.lock(block).import_cell(index as usize, cell, since, &frame).map_err(corrupt)? {
                    report.cells += 1;
                } else {
                    report.dropped += 1;
                }
            } else {
                t.lock(0).join_cell(&mut joined, cell, &frame).map_err(corrupt)?;
            }
        }
    }
    if let Some(t) = table
        && !joined.is_empty()
    {
        for i in 0..t.shards() {
            if t.lock(i).import_everywhere(&joined, latest_fold, &frame) {
                report.cells += 1;
            } else {
                report.dropped += 1;
            }
        }
    }
    Ok(())
}
