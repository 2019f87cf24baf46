//! Files forged by someone who holds the key secret, so the checksum passes: whatever they say,
//! reading them does not panic, holds no more than the store's bounds, and binds no key beyond
//! what a writer could have written (its window, counted from a capture at most
//! [`MAX_WRITE`] after the header's time).

use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, ManualClock, NANOS_PER_SEC, Nanos, Policy, SlidingLog, SlidingWindow,
    TokenBucket,
};

use super::stream::Sink;
use super::{MAGIC, MAX_WRITE, SNAPSHOT_VERSION, seal};
use crate::memory::summary::SPAN;
use crate::{Check, FoldSize, KeyHash, KeyHasher, MemoryOptions, MemoryStore, Moment, NamedPolicy, Restored, WhenFull};

const S: Nanos = NANOS_PER_SEC;
const CLOCK: Nanos = 1_800_000_000 * S;
const WALL: Nanos = 1_800_000_100 * S;
const SI: i64 = S as i64;
/// Keys a forged file names.
const KEYS: u8 = 40;

fn secret() -> KeyHasher {
    KeyHasher::from_secret(b"held by the forger as well, alas")
}

fn policies() -> Vec<NamedPolicy> {
    let p = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    vec![
        p("fixed", FixedWindow::new(3, 4 * S).unwrap().into()),
        p("log", SlidingLog::new(3, 4 * S).unwrap().into()),
        p("counter", SlidingWindow::new(3, 4 * S).unwrap().into()),
        p("token", TokenBucket::new(3, 1.0).unwrap().into()),
        p("leaky", LeakyBucket::new(1.0, 3, LeakMode::Police).unwrap().into()),
    ]
}

fn options() -> MemoryOptions {
    MemoryOptions { max_keys: 16, shards: 2, when_full: WhenFull::Fold(FoldSize { width: Some(8), depth: 2 }) }
}

fn key(n: u8) -> KeyHash {
    secret().hash(&[b"victim", &[n]])
}

/// A forged summary: its size (bits, rows), its latest fold, its cells (index, words).
type Summary = (u8, u8, Nanos, Vec<(u32, Vec<u64>)>);

/// One forged shard block.
#[derive(Debug, Clone)]
struct Block {
    captured: Nanos,
    entries: Vec<(u8, Vec<u64>)>,
    summary: Option<Summary>,
}

/// One forged policy section.
#[derive(Debug, Clone)]
struct Section {
    policy: usize,
    cell_words: usize,
    shards: u32,
    fold: Option<(u8, u8)>,
    blocks: Vec<Block>,
}

fn cell_words(policy: usize) -> usize {
    match policy {
        0 => 2,
        1 => 1 + SPAN,
        2 => 3,
        _ => 1,
    }
}

/// The bytes of a forged file, checksummed under the secret.
fn forge(sections: &[Section], tail: &[u8]) -> Vec<u8> {
    let secret = secret();
    let mut out = Sink::new(Vec::new(), seal::checksum(&secret));
    let all = policies();
    let w = |out: &mut Sink<Vec<u8>>, words: &[u64]| {
        for &v in words {
            out.u64(v).unwrap();
        }
    };
    out.bytes(&MAGIC).unwrap();
    out.u32(SNAPSHOT_VERSION).unwrap();
    out.bytes(&seal::secret_fingerprint(&secret)).unwrap();
    w(&mut out, &[CLOCK, WALL]);
    out.u8(0).unwrap();
    out.u32(sections.len() as u32).unwrap();
    for s in sections {
        let p = &all[s.policy];
        out.u16(p.name.len() as u16).unwrap();
        out.bytes(p.name.as_bytes()).unwrap();
        out.bytes(&seal::policy_fingerprint(&secret, p)).unwrap();
        out.u16((8 * s.cell_words) as u16).unwrap();
        out.u32(s.shards).unwrap();
        match s.fold {
            None => out.u8(0).unwrap(),
            Some((bits, depth)) => out.bytes(&[1, bits, depth]).unwrap(),
        }
        for b in &s.blocks {
            out.u64(b.captured).unwrap();
            out.u32(b.entries.len() as u32).unwrap();
            for (k, words) in &b.entries {
                out.bytes(&key(*k).0).unwrap();
                w(&mut out, words);
            }
            match &b.summary {
                None => out.u8(0).unwrap(),
                Some((bits, depth, since, cells)) => {
                    out.bytes(&[1, *bits, *depth]).unwrap();
                    out.u64(*since).unwrap();
                    out.u32(cells.len() as u32).unwrap();
                    for (index, words) in cells {
                        out.u32(*index).unwrap();
                        w(&mut out, words);
                    }
                }
            }
        }
    }
    out.bytes(tail).unwrap();
    out.finish().unwrap().0
}

/// Values a forger would try: the edges of every field.
fn word() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(3),
        Just(4),
        Just(u64::MAX),
        (0u64..(8 * S)).prop_map(|d| CLOCK + d),
        any::<u64>()
    ]
}

/// A cell of `policy`'s algorithm near the edges of what fits (or any words at all).
fn cell(policy: usize, words: usize) -> BoxedStrategy<Vec<u64>> {
    let start = CLOCK - CLOCK % (4 * S);
    let near = move |k: i64| start.checked_add_signed(k * 4 * SI).unwrap();
    let plausible: BoxedStrategy<Vec<u64>> = match policy {
        0 => ((-1i64..3).prop_map(near), 0u64..4).prop_map(|(end, n)| vec![end, n]).boxed(),
        1 => ((0u64..(6 * S)).prop_map(|d| CLOCK - d), 0..SPAN, 1u64..4)
            .prop_map(|(newest, j, n)| {
                let mut words = vec![newest; 1 + SPAN];
                words[1..].fill(0);
                words[1 + j] = n;
                words
            })
            .boxed(),
        2 => ((-2i64..2).prop_map(near), 0u64..4, 0u64..4).prop_map(|(s, p, c)| vec![s, p, c]).boxed(),
        _ => (-4i64..5).prop_map(|d| CLOCK.checked_add_signed(d * SI).unwrap()).prop_map(|t| vec![t]).boxed(),
    };
    if words != cell_words(policy) {
        return proptest::collection::vec(word(), words..=words).boxed();
    }
    prop_oneof![12 => plausible, 1 => proptest::collection::vec(word(), words..=words)].boxed()
}

fn block(policy: usize, words: usize, fold: Option<(u8, u8)>) -> impl Strategy<Value = Block> {
    let layout = match fold {
        Some(f) => prop_oneof![12 => Just(f), 1 => (0u8..4, 1u8..3)].boxed(),
        None => (0u8..4, 1u8..3).boxed(),
    };
    // A summary where the policy has none, now and then.
    let summaries = if fold.is_some() { 1 } else { 8 };
    (
        prop_oneof![30 => (0u64..(20 * S)).prop_map(|d| CLOCK + d), 1 => Just(CLOCK + MAX_WRITE + 1), 1 => Just(0)],
        proptest::collection::vec((0u8..KEYS, cell(policy, words)), 0..6),
        prop_oneof![
            summaries => Just(None),
            1 => (
                layout,
                prop_oneof![12 => Just(CLOCK), 1 => Just(u64::MAX)],
                proptest::collection::vec((0u32..20, cell(policy, words)), 0..4),
            )
                .prop_map(Some),
        ],
    )
        .prop_map(|(captured, entries, summary)| Block {
            captured,
            entries,
            summary: summary.map(|((bits, depth), since, cells)| (bits, depth, since, cells)),
        })
}

fn section() -> impl Strategy<Value = Section> {
    let shards = prop_oneof![6 => Just(1u32), 6 => Just(2), 6 => Just(4), 1 => Just(3)];
    (0usize..5, shards, proptest::option::of((0u8..4, 1u8..3))).prop_flat_map(|(policy, shards, fold)| {
        let words = cell_words(policy);
        let words = prop_oneof![20 => Just(words), 1 => Just(words + 1)];
        (Just(policy), words, Just(shards), Just(fold)).prop_flat_map(|(policy, words, shards, fold)| {
            let blocks = proptest::collection::vec(block(policy, words, fold), shards as usize..=shards as usize);
            blocks.prop_map(move |blocks| Section { policy, cell_words: words, shards, fold, blocks })
        })
    })
}

/// Restores `bytes` `passed` after the header's time; checks the bounds and the horizon.
fn read_forged(bytes: &[u8], passed: Nanos) -> Result<Restored, TestCaseError> {
    let dir =
        std::env::temp_dir().join(format!("sluice-forged-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state");
    std::fs::write(&path, bytes).unwrap();
    let now = Moment { clock: CLOCK + passed, wall: WALL + passed, boot: None };
    let clock = Arc::new(ManualClock::new(now.clock));
    let (store, restored) = MemoryStore::restore_at(policies(), options(), clock, &path, &secret(), now);
    let _ = std::fs::remove_dir_all(&dir);
    for (p, stats) in store.stats().iter().enumerate() {
        prop_assert!(stats.keys <= options().max_keys, "policy {p}: {} keys", stats.keys);
        prop_assert!(stats.bytes <= 1 << 16, "policy {p}: {} bytes", stats.bytes);
    }
    // No key stays bound beyond the latest capture a file may claim and two windows after it.
    let horizon = CLOCK + MAX_WRITE + 3 * 4 * S;
    for p in 0..policies().len() {
        for k in 0..KEYS {
            let d = store.decide_at(&[Check { policy: p, key: key(k), cost: 1 }], horizon).unwrap();
            prop_assert!(d.allowed, "policy {p}, key {k}: still bound after the horizon");
        }
    }
    Ok(restored)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(400)))]

    #[test]
    fn a_forged_file_binds_nothing_beyond_a_writers_horizon(
        sections in proptest::collection::vec(section(), 0..4),
        passed in prop_oneof![3 => Just(0u64), 1 => 0u64..(30 * S)],
    ) {
        read_forged(&forge(&sections, &[]), passed)?;
    }

    #[test]
    fn any_bytes_after_a_valid_header_are_read_without_harm(
        tail in proptest::collection::vec(any::<u8>(), 0..400),
        passed in 0u64..(10 * S),
    ) {
        read_forged(&forge(&[], &tail)[..], passed)?;
        // The same bytes as sections: a policy count, then whatever follows.
        let mut bytes = forge(&[], &tail);
        let count_at = MAGIC.len() + 4 + 16 + 16 + 1;
        bytes[count_at..count_at + 4].copy_from_slice(&1u32.to_le_bytes());
        read_forged(&bytes, passed)?;
    }
}

fn one_entry(policy: usize, words: Vec<u64>) -> Section {
    let block = Block { captured: CLOCK, entries: vec![(0, words)], summary: None };
    let empty = Block { captured: CLOCK, entries: vec![], summary: None };
    let fold = Some((2, 2)); // what options() gives a policy of 2 shards
    Section { policy, cell_words: cell_words(policy), shards: 2, fold, blocks: vec![block, empty] }
}

fn skipped_because(bytes: &[u8]) -> String {
    match read_forged(bytes, 0).unwrap() {
        Restored::Skipped(e) => e.to_string(),
        other => panic!("a forged file was read: {other:?}"),
    }
}

#[test]
fn cells_no_writer_writes_refuse_the_file() {
    let start = CLOCK - CLOCK % (4 * S);
    // A fixed window counting more than its limit, ending off the grid, or in a later window.
    for words in [vec![start + 4 * S, 4], vec![start + 4 * S + 1, 1], vec![start + 8 * S, 1]] {
        assert!(skipped_because(&forge(&[one_entry(0, words)], &[])).starts_with("corrupt: a cell no writer writes"));
    }
    // A bucket further ahead than its capacity; a log of more entries than its limit.
    assert!(skipped_because(&forge(&[one_entry(3, vec![CLOCK + 3 * S + 1])], &[])).contains("a cell no writer writes"));
    let mut log = vec![CLOCK];
    log.extend([2, 2].iter().chain([0; SPAN - 2].iter()));
    assert!(skipped_because(&forge(&[one_entry(1, log)], &[])).contains("a cell no writer writes"));
    // A key twice.
    let mut twice = one_entry(3, vec![CLOCK + S]);
    twice.blocks[1].entries.push((0, vec![CLOCK + S]));
    assert_eq!(skipped_because(&forge(&[twice], &[])), "corrupt: a key written twice");
    // The same cells within bounds are read, and bind their keys for as long as they say.
    let fine = forge(&[one_entry(0, vec![start + 4 * S, 3]), one_entry(3, vec![CLOCK + 3 * S])], &[]);
    let Restored::Loaded(loaded) = read_forged(&fine, 0).unwrap() else { panic!("a valid file was skipped") };
    assert_eq!((loaded.policies[0].keys, loaded.policies[3].keys), (1, 1));
}

#[test]
fn a_summary_out_of_its_own_size_refuses_the_file() {
    let mut s = one_entry(3, vec![CLOCK + S]);
    s.blocks[0].summary = Some((2, 2, CLOCK, vec![(8, vec![CLOCK + S])]));
    assert_eq!(skipped_because(&forge(&[s.clone()], &[])), "corrupt: a summary cell out of range");
    s.blocks[0].summary = Some((2, 2, CLOCK + S, vec![(0, vec![CLOCK + S])]));
    assert_eq!(skipped_because(&forge(&[s.clone()], &[])), "corrupt: a summary folded after its capture");
    s.blocks[0].summary = Some((30, 8, CLOCK, vec![]));
    assert_eq!(skipped_because(&forge(&[s], &[])), "corrupt: a summary size no store has");
}
