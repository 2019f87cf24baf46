//! The descriptor directory watched for changes (`reload_on_change`): a change is compared with
//! the bytes the load in use was parsed from, so a change made before the watcher's first look
//! is loaded, and a refused file is told once and tried again when it changes.

mod support;

use std::time::Duration;

use support::{Backend, Harness, call, limit_of, request};

const LIMIT: &str =
    "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n";

/// The `requests_per_unit` the service now answers for `edge`'s user limit, polled until it is
/// `want` or two seconds pass.
async fn waits_for(h: &Harness, want: u32) -> bool {
    let mut c = h.client().await;
    for i in 0..200 {
        let r = call(&mut c, request("edge", &[&[("user", &format!("u{i}"))]], 0)).await;
        if limit_of(&r.statuses[0]).map(|l| l.0) == Some(want) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn a_change_made_before_the_watchers_first_look_is_loaded() {
    let h = Harness::start(Backend::Memory, &[("edge.yaml", LIMIT)], "", "").await;
    assert!(waits_for(&h, 2).await);
    // Changed after the load, before the watcher starts: its first look must see it.
    h.dir.write("edge.yaml", &LIMIT.replace("requests_per_unit: 2", "requests_per_unit: 3"));
    tokio::spawn(sluice_rls::reload_on_change(h.rls.clone(), Duration::from_millis(20)));
    assert!(waits_for(&h, 3).await, "the change made before the first look was loaded");

    // A broken file is refused (the running limit stays); fixed, it is loaded.
    h.dir.write("edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(waits_for(&h, 3).await, "the refused file left the running limit");
    h.dir.write("edge.yaml", &LIMIT.replace("requests_per_unit: 2", "requests_per_unit: 4"));
    assert!(waits_for(&h, 4).await, "the fixed file was loaded");
}
