//! Memory per key: the resident set size (VmRSS) of a process before and after one million live
//! keys enter a memory store, for each O(1) algorithm (and the sliding log, for comparison).
//!
//! Each algorithm is measured in a child process of its own (this binary, re-run with the
//! algorithm's name), so one measurement's freed memory cannot hide in the next one's baseline.
//! The store is sized for 2^21 keys per policy in 64 shards, so all 1,000,000 keys stay; each key
//! is charged once, so no entry is fresh. Target: a million live keys of an O(1) algorithm take
//! at most 64 MiB above the empty process.
//!
//! `cargo bench -p sluice-store --bench memory`

use std::process::Command;
use std::sync::Arc;

use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, SlidingLog, SlidingWindow, TokenBucket};
use sluice_store::{Check, KeyHasher, MemoryOptions, MemoryStore, NamedPolicy, WhenFull};

const KEYS: u64 = 1_000_000;
const MIB: f64 = 1024.0 * 1024.0;
/// The most a million live keys of an O(1) algorithm may add to the process, MiB.
const TARGET_MIB: f64 = 64.0;

const ALGORITHMS: [&str; 4] = ["token-bucket", "fixed-window", "sliding-window", "sliding-log"];

fn policy(name: &str) -> Option<Policy> {
    let minute = 60 * NANOS_PER_SEC;
    let p = match name {
        "token-bucket" => TokenBucket::new(100, 1.0).ok()?.into(),
        "fixed-window" => FixedWindow::new(100, minute).ok()?.into(),
        "sliding-window" => SlidingWindow::new(100, minute).ok()?.into(),
        "sliding-log" => SlidingLog::new(100, minute).ok()?.into(),
        _ => return None,
    };
    Some(p)
}

/// The resident set size in bytes, from the kernel's status file of this process.
fn rss_bytes() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("reading process status: {e}"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).ok_or("no VmRSS line in the process status")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("unreadable VmRSS line: {line}"))?;
    Ok(kb * 1024)
}

/// Child: fills a store with `KEYS` live keys of `name` and prints one result line.
fn measure(name: &str) -> Result<(), String> {
    let policy = policy(name).ok_or_else(|| format!("unknown algorithm {name}"))?;
    let options = MemoryOptions { max_keys: 1 << 21, shards: 64, when_full: WhenFull::default() };
    let now = 1_000 * NANOS_PER_SEC;
    let store =
        MemoryStore::new(vec![NamedPolicy { name: name.into(), policy }], options, Arc::new(ManualClock::new(now)));
    let hasher = KeyHasher::random();
    let before = rss_bytes()?;
    for i in 0..KEYS {
        let key = hasher.hash(&[&i.to_le_bytes()]);
        let verdict = store.decide_at(&[Check { policy: 0, key, cost: 1 }], now).map_err(|e| e.to_string())?;
        if !verdict.allowed {
            return Err(format!("key {i} was denied"));
        }
    }
    let after = rss_bytes()?;
    let keys = store.stats()[0].keys;
    if keys as u64 != KEYS {
        return Err(format!("{keys} keys held, expected {KEYS}"));
    }
    let delta = after.saturating_sub(before);
    println!(
        "  {name:<15} {keys} keys  RSS +{:>6.1} MiB  {:>5.1} bytes/key{}",
        delta as f64 / MIB,
        delta as f64 / KEYS as f64,
        if name == "sliding-log" {
            "  (O(limit) state, no target)".to_string()
        } else if delta as f64 / MIB <= TARGET_MIB {
            format!("  within the {TARGET_MIB} MiB target")
        } else {
            format!("  ABOVE the {TARGET_MIB} MiB target")
        }
    );
    std::hint::black_box(&store);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        let name = args.get(i + 1).map(String::as_str).unwrap_or("");
        if let Err(e) = measure(name) {
            eprintln!("memory bench ({name}): {e}");
            std::process::exit(1);
        }
        return;
    }
    // `cargo test --benches` runs this without `--bench`: measuring is for `cargo bench` only.
    if !args.iter().any(|a| a == "--bench") {
        println!("memory bench: run with `cargo bench -p sluice-store --bench memory`");
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("memory bench: cannot find its own executable: {e}");
            std::process::exit(1);
        }
    };
    println!("memory for {KEYS} live keys (RSS delta per process):");
    let mut failed = false;
    for name in ALGORITHMS {
        match Command::new(&exe).args(["--measure", name]).status() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("memory bench: {name} failed ({s})");
                failed = true;
            }
            Err(e) => {
                eprintln!("memory bench: cannot run {name}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
