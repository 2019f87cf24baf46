//! Snapshots of the memory store: a restart keeps the limits, ages them by the time that
//! passed (never more), keeps folded keys folded, and survives a damaged file by starting empty.
//!
//! The clocks are explicit ([`Moment`], [`ManualClock`]): a restart "after ten seconds" is a
//! moment whose wall clock reads ten seconds more, in a process whose clock reads anything.

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, ManualClock, NANOS_PER_SEC, Nanos, Policy, SlidingLog, SlidingWindow,
    TokenBucket,
};
use sluice_store::conformance::Reference;
use sluice_store::{
    CONTINUE_WITHIN, Check, FoldSize, KeyHash, KeyHasher, MemoryOptions, MemoryStore, Moment, NamedPolicy, Restored,
    SnapshotError, Store, WhenFull,
};

const S: Nanos = NANOS_PER_SEC;
/// The writer's clock at the first request (a Unix-like time, so windows have a past).
const T0: Nanos = 1_700_000_000 * S;
/// The wall clock when the snapshot is written.
const WALL: Nanos = 1_700_000_500 * S;

fn secret() -> KeyHasher {
    KeyHasher::from_secret(b"the key secret every restart shares")
}

fn user(n: u64) -> KeyHash {
    secret().hash(&[b"user", &n.to_le_bytes()])
}

fn req(policy: usize, n: u64, cost: u64) -> [Check; 1] {
    [Check { policy, key: user(n), cost }]
}

/// A path in a fresh temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-snapshot-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("state")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every algorithm, each spent by 4 units and fresh again within 8 s.
fn algorithms() -> Vec<NamedPolicy> {
    let p = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    vec![
        p("fixed", FixedWindow::new(4, 8 * S).unwrap().into()),
        p("log", SlidingLog::new(4, 8 * S).unwrap().into()),
        p("counter", SlidingWindow::new(4, 4 * S).unwrap().into()),
        p("token", TokenBucket::new(4, 0.5).unwrap().into()),
        p("leaky", LeakyBucket::new(0.5, 4, LeakMode::Police).unwrap().into()),
    ]
}

fn written_at(clock: Nanos) -> Moment {
    Moment { clock, wall: WALL, boot: None }
}

/// A second as a signed wall-clock difference.
const SI: i64 = S as i64;

/// A restart: a new store of `policies` reading `path`, whose clock reads `clock` when the wall
/// clock reads `WALL + wall_later` nanoseconds (negative: the wall clock went back).
fn restart(
    policies: Vec<NamedPolicy>,
    options: MemoryOptions,
    path: &std::path::Path,
    clock: Nanos,
    wall_later: i64,
) -> (MemoryStore, Restored, Arc<ManualClock>) {
    let manual = Arc::new(ManualClock::new(clock));
    let wall = WALL.checked_add_signed(wall_later).unwrap();
    let now = Moment { clock, wall, boot: None };
    let (store, restored) = MemoryStore::restore_at(policies, options, manual.clone(), path, &secret(), now);
    (store, restored, manual)
}

fn loaded(r: &Restored) -> &sluice_store::Loaded {
    match r {
        Restored::Loaded(l) => l,
        other => panic!("the snapshot was not read: {other:?}"),
    }
}

fn skipped(r: &Restored) -> &SnapshotError {
    match r {
        Restored::Skipped(e) => e,
        other => panic!("a damaged snapshot was read: {other:?}"),
    }
}

/// Spends user 0 fully and user 1 by one unit under every policy, at T0; writes the snapshot.
fn spent_store(path: &std::path::Path, options: MemoryOptions) -> MemoryStore {
    let store = MemoryStore::new(algorithms(), options, Arc::new(ManualClock::new(T0)));
    for p in 0..store.policies().len() {
        while store.decide_at(&req(p, 0, 1), T0).unwrap().allowed {}
        assert!(store.decide_at(&req(p, 1, 1), T0).unwrap().allowed);
    }
    let written = store.write_snapshot_at(path, &secret(), written_at(T0)).unwrap();
    assert_eq!(written.keys, 10, "two keys under each of five policies");
    assert_eq!(written.unwritable, 0);
    store
}

#[test]
fn a_restart_keeps_every_limit_and_ages_it_by_the_time_that_passed() {
    let dir = Scratch::new("keeps");
    spent_store(&dir.file(), MemoryOptions::default());
    // One second later, in a process whose clock is in the same frame (as the system clock is).
    let (store, restored, _) = restart(algorithms(), MemoryOptions::default(), &dir.file(), T0 + S, SI);
    let report = loaded(&restored);
    assert_eq!(report.elapsed, S);
    assert!(report.policies.iter().all(|p| p.restored && p.keys == 2), "{report:?}");
    assert!(report.left_out.is_empty());
    for p in 0..5 {
        let name = &store.policies()[p].name;
        // The spent key is still spent, the half-used one still half-used, a new one is fresh.
        assert!(!store.decide_now(&req(p, 0, 1)).unwrap().allowed, "{name}: spent key admitted after restart");
        let fresh = store.decide_now(&req(p, 7, 1)).unwrap().decisions[0].remaining;
        assert_eq!(fresh, 3, "{name}: a fresh key");
    }
    // Exactly as far as the store that never restarted, where the state is exact: the buckets
    // refilled by the one second (half a token: none yet), the fixed window kept its count.
    let exact = MemoryStore::new(algorithms(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
    for p in [0, 3, 4] {
        assert!(exact.decide_at(&req(p, 1, 1), T0).unwrap().allowed);
        let want = exact.decide_at(&req(p, 1, 1), T0 + S).unwrap().decisions[0];
        let got = store.decide_now(&req(p, 1, 1)).unwrap().decisions[0];
        assert_eq!(got, want, "{}", store.policies()[p].name);
    }
}

#[test]
fn time_passed_across_the_restart_counts_as_passed_and_no_more() {
    let dir = Scratch::new("aged");
    spent_store(&dir.file(), MemoryOptions::default());
    let token = 3;
    // The new process's clock reads 40 s when the wall clock says 6 s passed: 3 tokens refilled.
    let (store, ..) = restart(algorithms(), MemoryOptions::default(), &dir.file(), 40 * S, 6 * SI);
    let d = store.decide_at(&req(token, 0, 1), 40 * S).unwrap().decisions[0];
    assert_eq!(d.remaining, 2, "3 tokens back after 6 s at 0.5/s, one spent now");
    // The wall clock went back 5 s: nothing passed, the bucket is as it was written.
    let (store, restored, _) = restart(algorithms(), MemoryOptions::default(), &dir.file(), 40 * S, -5 * SI);
    assert_eq!(loaded(&restored).elapsed, 0);
    let d = store.decide_at(&req(token, 0, 1), 40 * S).unwrap().decisions[0];
    assert!(!d.allowed);
    assert_eq!(d.retry_after, 2 * S, "one token takes 2 s, counted from the restart");
    // Long after every window: everything is fresh, and nothing fresh is stored.
    let (store, restored, _) = restart(algorithms(), MemoryOptions::default(), &dir.file(), T0, 3_600 * SI);
    assert!(loaded(&restored).policies.iter().all(|p| p.keys == 0));
    assert!(store.stats().iter().all(|p| p.keys == 0));
    for p in 0..5 {
        assert_eq!(store.decide_now(&req(p, 0, 1)).unwrap().decisions[0].remaining, 3);
    }
}

#[test]
fn the_boot_clock_keeps_a_wall_clock_stepped_forward_from_ageing_states() {
    let dir = Scratch::new("boot");
    let store = MemoryStore::new(algorithms(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
    while store.decide_at(&req(3, 0, 1), T0).unwrap().allowed {}
    let boot = |uptime| Some(sluice_store::Boot { id: [9; 16], uptime });
    let then = Moment { clock: T0, wall: WALL, boot: boot(1_000 * S) };
    store.write_snapshot_at(&dir.file(), &secret(), then).unwrap();
    // The wall clock jumped an hour; the machine has been up 2 s longer.
    let now = Moment { clock: T0 + 2 * S, wall: WALL + 3_600 * S, boot: boot(1_002 * S) };
    let (store, restored) = MemoryStore::restore_at(
        algorithms(),
        MemoryOptions::default(),
        Arc::new(ManualClock::new(now.clock)),
        &dir.file(),
        &secret(),
        now,
    );
    assert_eq!(loaded(&restored).elapsed, 2 * S - sluice_store::UPTIME_RESOLUTION);
    // One token takes 2 s: aged by 10 ms less, the bucket is 10 ms short of it.
    let d = store.decide_now(&req(3, 0, 1)).unwrap().decisions[0];
    assert!(!d.allowed, "aged by the wall clock's hour: {d:?}");
    assert_eq!(d.retry_after, sluice_store::UPTIME_RESOLUTION);
}

#[test]
fn a_changed_policy_is_a_new_policy_and_the_others_keep_their_state() {
    let dir = Scratch::new("changed");
    spent_store(&dir.file(), MemoryOptions::default());
    let mut policies = algorithms();
    // "token" gets a larger capacity, "fixed" a new name; the rest are as written, reordered.
    policies[3].policy = TokenBucket::new(5, 0.5).unwrap().into();
    policies[0].name = "fixed-2".into();
    policies.swap(1, 4);
    let (store, restored, _) = restart(policies, MemoryOptions::default(), &dir.file(), T0, 0);
    let report = loaded(&restored);
    let kept: Vec<(&str, bool)> = report.policies.iter().map(|p| (p.name.as_str(), p.restored)).collect();
    assert_eq!(kept, [("fixed-2", false), ("leaky", true), ("counter", true), ("token", false), ("log", true)]);
    assert_eq!(report.left_out, ["fixed", "token"]);
    for (p, spent) in [(0, false), (1, true), (2, true), (3, false), (4, true)] {
        let d = store.decide_now(&req(p, 0, 1)).unwrap();
        assert_eq!(!d.allowed, spent, "{}", store.policies()[p].name);
    }
}

/// A store of 2 keys per policy in one shard, folding into a 1-cell summary.
fn tiny() -> MemoryOptions {
    MemoryOptions { max_keys: 2, shards: 1, when_full: WhenFull::Fold(FoldSize { width: Some(1), depth: 1 }) }
}

#[test]
fn keys_folded_into_the_summary_stay_folded_across_a_restart() {
    let dir = Scratch::new("folded");
    let store = MemoryStore::new(algorithms(), tiny(), Arc::new(ManualClock::new(T0)));
    for p in 0..5 {
        while store.decide_at(&req(p, 0, 1), T0).unwrap().allowed {}
        // Two more keys push the spent one out of the table, into the summary.
        for n in [1, 2] {
            assert!(store.decide_at(&req(p, n, 1), T0).unwrap().allowed);
        }
        assert_eq!(store.stats()[p].evicted_lru, 1);
    }
    let written = store.write_snapshot_at(&dir.file(), &secret(), written_at(T0)).unwrap();
    assert_eq!((written.keys, written.cells), (10, 5), "two keys and one live cell per policy");
    for options in [tiny(), MemoryOptions::default()] {
        // The same layout puts the cell back; another joins it into every cell: spent either way.
        let (store, restored, _) = restart(algorithms(), options, &dir.file(), T0 + S, SI);
        let report = loaded(&restored);
        for p in 0..5 {
            assert!(report.policies[p].cells >= 1, "{options:?}: {report:?}");
            let name = &store.policies()[p].name;
            assert!(!store.decide_now(&req(p, 0, 1)).unwrap().allowed, "{name} ({options:?}): the evicted key");
        }
    }
}

#[test]
fn a_smaller_store_keeps_the_most_recently_used_and_folds_the_rest() {
    let dir = Scratch::new("smaller");
    let store = MemoryStore::new(algorithms(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
    for n in 0..50 {
        while store.decide_at(&req(3, n, 1), T0).unwrap().allowed {}
    }
    store.write_snapshot_at(&dir.file(), &secret(), written_at(T0)).unwrap();
    let options = MemoryOptions { max_keys: 8, shards: 1, when_full: WhenFull::default() };
    let (store, restored, _) = restart(algorithms(), options, &dir.file(), T0, 0);
    let report = loaded(&restored);
    assert_eq!(report.policies[3].keys, 50, "every key stored in turn");
    assert_eq!(store.stats()[3].keys, 8);
    assert_eq!(store.stats()[3].evicted_lru, 42);
    for n in 0..50 {
        assert!(!store.decide_now(&req(3, n, 1)).unwrap().allowed, "key {n} loosened by a smaller store");
    }
    // Under `refuse`, the keys that do not fit are dropped, and counted.
    let options = MemoryOptions { when_full: WhenFull::Refuse, ..options };
    let (_, restored, _) = restart(algorithms(), options, &dir.file(), T0, 0);
    let token = &loaded(&restored).policies[3];
    assert_eq!((token.keys, token.dropped), (8, 42));
}

#[test]
fn a_damaged_file_is_skipped_whole_and_the_store_starts_empty() {
    let dir = Scratch::new("damaged");
    spent_store(&dir.file(), tiny());
    let good = std::fs::read(dir.file()).unwrap();
    let try_bytes = |bytes: &[u8]| {
        std::fs::write(dir.file(), bytes).unwrap();
        let (store, restored, _) = restart(algorithms(), tiny(), &dir.file(), T0, 0);
        let reason = skipped(&restored).to_string();
        assert!(store.stats().iter().all(|p| p.keys == 0), "a skipped file left keys behind");
        assert!(store.decide_now(&req(0, 0, 1)).unwrap().allowed);
        reason
    };
    // Every single flipped byte, anywhere, is caught.
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        try_bytes(&bad);
    }
    // Every truncation, and anything appended.
    for len in 0..good.len() {
        try_bytes(&good[..len]);
    }
    assert_eq!(try_bytes(&[good.as_slice(), b"x"].concat()), "corrupt: bytes after the checksum");
    // Each reason is named.
    assert_eq!(try_bytes(b"[store]\nkind = \"memory\"\n"), "not a sluice snapshot");
    let mut version = good.clone();
    version[8] = 7;
    assert_eq!(try_bytes(&version), "written in snapshot format 7; this sluice reads format 1");
    assert_eq!(try_bytes(&good[..good.len() - 1]), "truncated");
    let mut last = good.clone();
    *last.last_mut().unwrap() ^= 1;
    assert!(try_bytes(&last).contains("checksum does not match"));
    // Another key secret: refused before anything is read.
    std::fs::write(dir.file(), &good).unwrap();
    let other = KeyHasher::from_secret(b"another secret of sixteen bytes or more");
    let now = Moment { clock: T0, wall: WALL, boot: None };
    let (_, restored) =
        MemoryStore::restore_at(algorithms(), tiny(), Arc::new(ManualClock::new(T0)), &dir.file(), &other, now);
    assert_eq!(skipped(&restored).to_string(), "written with another key secret");
    // No file: an empty store, and nothing to report.
    std::fs::remove_file(dir.file()).unwrap();
    let (_, restored, _) = restart(algorithms(), tiny(), &dir.file(), T0, 0);
    assert!(matches!(restored, Restored::Missing));
}

#[test]
fn a_file_larger_than_the_stores_bounds_is_refused_unread() {
    let dir = Scratch::new("large");
    // Any snapshot of one policy of 2 keys is a few hundred bytes; this is 40 MB of zeros.
    let f = std::fs::File::create(dir.file()).unwrap();
    f.set_len(40_000_000).unwrap();
    let (_, restored, _) = restart(algorithms()[..1].to_vec(), tiny(), &dir.file(), T0, 0);
    assert!(matches!(skipped(&restored), SnapshotError::TooLarge { size: 40_000_000, .. }), "{restored:?}");
}

#[test]
fn a_write_is_atomic_and_private() {
    let dir = Scratch::new("atomic");
    let store = spent_store(&dir.file(), tiny());
    let first = std::fs::read(dir.file()).unwrap();
    assert!(store.decide_at(&req(3, 5, 1), T0).unwrap().allowed);
    store.write_snapshot_at(&dir.file(), &secret(), written_at(T0)).unwrap();
    // Replaced whole, and no temporary file is left beside it.
    assert_ne!(std::fs::read(dir.file()).unwrap(), first);
    let names: Vec<String> =
        std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["state"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "readable by its owner only: {mode:o}");
    }
    // A directory that is not there: an error, and the old file untouched.
    let nowhere = dir.0.join("missing").join("state");
    assert!(store.write_snapshot_at(&nowhere, &secret(), written_at(T0)).is_err());
    assert!(!nowhere.exists());
}

#[test]
fn a_window_restored_on_another_grid_counts_until_the_grid_says_so() {
    // Clocks more than a second apart are two clocks: the written window, moved, is off the new
    // grid, and counts until the later boundary (a whole window more), never an earlier one.
    // Within a second the store continues the writer's clock, and the window ends on time.
    let fixed = || vec![algorithms()[0].clone()];
    let beyond = CONTINUE_WITHIN as i64 + 1;
    // When the writer's clock reads `until` (scanned in tenths of a second), the key is admitted
    // again: the exact end is T0 + 8 s, moved states end later (T0 + 16 s on the new clock, or the
    // same boundary a second later by the writer's clock), continued ones on time.
    let cases = [(beyond, T0 + 15 * S), (-beyond, T0 + 91 * S / 10), (SI / 2, T0 + 8 * S), (-SI / 2, T0 + 8 * S)];
    for (offset, until) in cases {
        let dir = Scratch::new("grid");
        let store = MemoryStore::new(fixed(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
        while store.decide_at(&req(0, 0, 1), T0).unwrap().allowed {}
        store.write_snapshot_at(&dir.file(), &secret(), written_at(T0 + S)).unwrap();
        let now = T0 + 3 * S;
        let clock = now.checked_add_signed(offset).unwrap();
        let (store, restored, _) = restart(fixed(), MemoryOptions::default(), &dir.file(), clock, 2 * SI);
        let continued = loaded(&restored).clock_offset;
        assert_eq!(continued, if offset.unsigned_abs() <= CONTINUE_WITHIN { offset } else { 0 });
        // Times of the writer's clock, as the store reads them.
        let first = (0..200).map(|i| now + i * S / 10).find(|&t| {
            store.decide_at(&req(0, 0, 1), t.checked_add_signed(offset - continued).unwrap()).unwrap().allowed
        });
        assert_eq!(first, Some(until), "offset {offset}");
    }
}

#[test]
fn a_calendar_day_is_kept_until_the_zones_midnight_and_moved_to_a_midnight() {
    use sluice_core::{CalendarWindows, Period, Zone};
    // A day in UTC+2: T0 (2023-11-14 22:13:20 UTC) is 00:13:20 on the 15th there, whose day
    // ends at 22:00 UTC on the 15th.
    let zone = Zone::new("Test/Plus2", 2 * 3_600, vec![]).unwrap().interned();
    let daily = || {
        let w = FixedWindow::calendar(2, CalendarWindows::new(Period::Day, zone)).unwrap();
        vec![NamedPolicy { name: "daily".into(), policy: w.into() }]
    };
    let midnight = (1_700_000_000 / 86_400 + 1) * 86_400 * S + 22 * 3_600 * S;
    assert_eq!(FixedWindow::calendar(2, CalendarWindows::new(Period::Day, zone)).unwrap().bounds(T0).1, midnight);
    // A clock continued (within a second) or the same: the day ends at its midnight on the
    // writer's clock. Another clock, a second and a nanosecond ahead: the moved end falls just
    // after the new clock's midnight, and goes on to the next (a day later, never earlier).
    let beyond = CONTINUE_WITHIN as i64 + 1;
    for (offset, until) in [(SI / 2, midnight), (0, midnight), (beyond, midnight + 86_400 * S - S)] {
        let dir = Scratch::new("calendar");
        let store = MemoryStore::new(daily(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
        while store.decide_at(&req(0, 0, 1), T0).unwrap().allowed {}
        store.write_snapshot_at(&dir.file(), &secret(), written_at(T0 + S)).unwrap();
        let now = T0 + 3 * S;
        let clock = now.checked_add_signed(offset).unwrap();
        let (store, restored, _) = restart(daily(), MemoryOptions::default(), &dir.file(), clock, 2 * SI);
        let report = loaded(&restored);
        assert!(report.policies[0].restored, "{report:?}");
        let continued = report.clock_offset;
        let at = |t: Nanos| t.checked_add_signed(offset - continued).unwrap();
        assert!(!store.decide_at(&req(0, 0, 1), at(midnight - S)).unwrap().allowed, "offset {offset}: spent all day");
        // The first second, on the writer's clock, at which the key is admitted again.
        let first = (0..3).map(|d| until - S + d * S).find(|&t| store.decide_at(&req(0, 0, 1), at(t)).unwrap().allowed);
        assert_eq!(first, Some(until), "offset {offset}");
    }
}

#[test]
fn a_million_keys_go_through_a_snapshot_at_their_bound() {
    // The default bound of one policy, full of spent buckets: the file holds 24 bytes a key
    // (its hash and the bucket's time), and reading it back restores every key.
    // The figures printed are indicative (a debug build, in a test).
    let policies = vec![NamedPolicy { name: "token".into(), policy: TokenBucket::new(4, 0.001).unwrap().into() }];
    let store = MemoryStore::new(policies.clone(), MemoryOptions::default(), Arc::new(ManualClock::new(T0)));
    let keys = 1_000_000u64;
    let refused = (0..keys).filter(|&n| !store.decide_one_at(&req(0, n, 4)[0], T0).unwrap().allowed).count() as u64;
    // The shards fill unevenly, so a few keys were folded into the summary before the bound
    // was reached; none was lost, and the file holds every key the table does. Now and then a
    // new key's summary cells were all spent by folded keys, and it was refused (the fold's
    // cost, in the strict direction): rare, but not never.
    let stats = &store.stats()[0];
    let held = stats.keys as u64;
    assert_eq!(held + stats.evicted_lru + refused, keys);
    assert!(refused < 100, "{refused} new keys refused");
    assert!(held > keys * 99 / 100, "{held} held");
    let dir = Scratch::new("million");
    let started = std::time::Instant::now();
    let written = store.write_snapshot_at(&dir.file(), &secret(), written_at(T0)).unwrap();
    let wrote = started.elapsed();
    assert_eq!(written.keys, held);
    // 24 bytes a key held, and the fold summary: about 24 bytes a key that went in, in all.
    assert!(written.bytes <= keys * 24 + 100_000, "{} bytes", written.bytes);
    drop(store);
    let started = std::time::Instant::now();
    let (store, restored, _) = restart(policies, MemoryOptions::default(), &dir.file(), T0 + S, SI);
    let read = started.elapsed();
    assert_eq!(loaded(&restored).policies[0].keys, held);
    assert_eq!(store.stats()[0].keys as u64, held);
    // Held and folded keys alike are still spent after the restart.
    for n in [0, keys / 2, keys - 1] {
        assert!(!store.decide_now(&req(0, n, 1)).unwrap().allowed, "key {n}");
    }
    println!(
        "{keys} keys: {:.1} MB written in {:.0} ms, read back in {:.0} ms",
        written.bytes as f64 / 1e6,
        wrote.as_secs_f64() * 1e3,
        read.as_secs_f64() * 1e3
    );
}

/// Random traffic through a small folding store in the writer's clock, a snapshot, then random
/// traffic through the restored store, whose clock reads `shift` more than the writer's did at
/// the same instant, `passed` after the write. An exact store that never restarted sees the same
/// admitted traffic in the writer's clock: every request the restored store admits, it must
/// admit.
///
/// For the windows, `shift` is a multiple of the window (as between two clocks that both follow
/// the wall clock): windows are aligned to the clock, and another alignment is another limit
/// (`a_window_restored_on_another_grid_counts_until_the_grid_says_so`). Buckets and logs have no
/// grid and take any shift.
fn restart_replay(
    which: usize,
    before: &[(u8, u64, u64)],
    passed: Nanos,
    shift: Nanos,
    after: &[(u8, u64, u64)],
) -> Result<(), TestCaseError> {
    let dir = Scratch::new("replay");
    let policy = algorithms()[which].clone();
    let limit = policy.policy.limit();
    let fold = FoldSize { width: Some(2), depth: 2 };
    let options = MemoryOptions { max_keys: 3, shards: 1, when_full: WhenFull::Fold(fold) };
    let old = MemoryStore::new(vec![policy.clone()], options, Arc::new(ManualClock::new(T0)));
    let mut exact = Reference::new(std::slice::from_ref(&policy));
    let mut t = T0;
    for &(k, gap, cost) in before {
        t += gap;
        let c = req(0, u64::from(k), cost.min(limit));
        if old.decide_at(&c, t).unwrap().allowed {
            prop_assert!(exact.decide(&c, t).unwrap().allowed, "before the restart");
        }
    }
    old.write_snapshot_at(&dir.file(), &secret(), written_at(t)).unwrap();
    let mut now = t + passed + shift;
    let (store, restored, _) = restart(vec![policy.clone()], options, &dir.file(), now, passed as i64);
    let Restored::Loaded(loaded) = restored else { return Err(TestCaseError::fail(format!("{restored:?}"))) };
    for (i, &(k, gap, cost)) in after.iter().enumerate() {
        now += gap;
        let c = req(0, u64::from(k), cost.min(limit));
        // The store's clock may continue the writer's (then it reads `clock_offset` less).
        if store.decide_at(&c, now.checked_add_signed(-loaded.clock_offset).unwrap()).unwrap().allowed {
            let want = exact.decide(&c, now - shift).unwrap();
            prop_assert!(want.allowed, "{}: request {} after the restart admitted beyond the limit", policy.name, i);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(250))]

    #[test]
    fn a_restart_never_admits_beyond_a_limit(
        which in 0usize..5,
        before in proptest::collection::vec((0u8..6, 0u64..(S / 2), 0u64..3), 0..80),
        passed in 0u64..(10 * S),
        windows in 0u64..4,
        odd in 0u64..(3 * S),
        after in proptest::collection::vec((0u8..6, 0u64..(S / 2), 0u64..3), 1..60),
    ) {
        let policy = algorithms()[which].policy;
        let gridded = matches!(policy, Policy::FixedWindow(_) | Policy::SlidingWindow(_));
        let shift = windows * policy.window() + if gridded { 0 } else { odd };
        restart_replay(which, &before, passed, shift, &after)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(200)))]

    /// Bytes nobody with the secret wrote: a real snapshot with a few bytes changed, or
    /// anything after its first bytes. Always skipped, whatever they are.
    #[test]
    fn a_file_changed_without_the_secret_is_always_skipped(
        changes in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6),
        keep in any::<prop::sample::Index>(),
        tail in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let dir = Scratch::new("changed-bytes");
        spent_store(&dir.file(), tiny());
        let good = std::fs::read(dir.file()).unwrap();
        let mut bad = good.clone();
        for (at, x) in &changes {
            bad[at.index(good.len())] ^= x;
        }
        let mut spliced = good[..keep.index(good.len())].to_vec();
        spliced.extend_from_slice(&tail);
        for bytes in [bad, spliced] {
            if bytes == good {
                continue;
            }
            std::fs::write(dir.file(), &bytes).unwrap();
            let (store, restored, _) = restart(algorithms(), tiny(), &dir.file(), T0, 0);
            prop_assert!(matches!(restored, Restored::Skipped(_)), "{:?}", restored);
            prop_assert!(store.stats().iter().all(|p| p.keys == 0));
        }
    }
}
