//! `[store] snapshot`: where the memory store's state survives a restart, and how often it is
//! written; refused where it cannot work.

use sluice_config::{Snapshot, StoreConfig, parse};
use sluice_core::NANOS_PER_SEC;

const SECRET: &str = "[server]\nkey_secret = \"a long random secret for the tests\"\n";

fn snapshot_of(file: &str, store: &str) -> Result<Option<Snapshot>, String> {
    match parse(file, &format!("{SECRET}[store]\n{store}")).map_err(|e| e.to_string())?.store {
        StoreConfig::Memory { snapshot, .. } => Ok(snapshot),
        other => panic!("not a memory store: {other:?}"),
    }
}

#[test]
fn a_snapshot_file_and_its_interval() {
    let s = snapshot_of("/etc/sluice/gateway.toml", "snapshot = \"/var/lib/sluice/state\"\n").unwrap().unwrap();
    assert_eq!(s.path, std::path::Path::new("/var/lib/sluice/state"));
    assert_eq!(s.interval, 10 * NANOS_PER_SEC, "every 10 s by default");
    // A relative path is the configuration's neighbour, as key_secret_file is.
    let s = snapshot_of("/etc/sluice/gateway.toml", "snapshot = \"state\"\nsnapshot_interval = \"2s\"\n").unwrap();
    let s = s.unwrap();
    assert_eq!(s.path, std::path::Path::new("/etc/sluice/state"));
    assert_eq!(s.interval, 2 * NANOS_PER_SEC);
    // None by default.
    assert_eq!(snapshot_of("g.toml", "kind = \"memory\"\n").unwrap(), None);
    assert_eq!(parse("g.toml", "").unwrap().store, parse("g.toml", "[store]\n").unwrap().store);
}

#[test]
fn a_snapshot_is_refused_where_it_cannot_work() {
    let e = snapshot_of("g.toml", "snapshot_interval = \"5s\"\n").unwrap_err();
    assert!(e.starts_with("g.toml:4: store.snapshot_interval: needs `snapshot`"), "{e}");
    let e = snapshot_of("g.toml", "snapshot = \"s\"\nsnapshot_interval = \"10ms\"\n").unwrap_err();
    assert!(e.contains("store.snapshot_interval: must be at least 100ms"), "{e}");
    let e = snapshot_of("g.toml", "snapshot = \"s\"\nsnapshot_interval = \"soon\"\n").unwrap_err();
    assert!(e.contains("store.snapshot_interval"), "{e}");
    let e = snapshot_of("g.toml", "snapshot = \"/var/lib/sluice/\"\n").unwrap_err();
    assert!(e.contains("store.snapshot: `/var/lib/sluice/` names no file"), "{e}");
    // Redis keeps its own state.
    let redis = "kind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\non_error = \"fail-closed\"\nsnapshot = \"s\"\n";
    let e = parse("g.toml", &format!("{SECRET}[store]\n{redis}")).unwrap_err().to_string();
    assert!(e.starts_with("g.toml:7: store.snapshot: applies only to kind = \"memory\""), "{e}");
    // Without a key secret the next process hashes every client to another key.
    let e = parse("g.toml", "[store]\nsnapshot = \"s\"\n").unwrap_err().to_string();
    assert!(e.starts_with("g.toml:2: server.key_secret: a snapshot is read by the next process"), "{e}");
}
