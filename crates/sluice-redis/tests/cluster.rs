//! A real three-node Redis Cluster: keys hash-tagged by key hash, one script call per slot
//! group, concurrently, and a request admitted only if every group admits.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use sluice_core::{FixedWindow, NANOS_PER_SEC, Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source, key_slot};
use sluice_store::{Check, KeyHash, KeyHasher, NamedPolicy, Settle};
use support::RedisCluster;

const T: u64 = 1_700_000_000 * NANOS_PER_SEC;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_limit_request_across_slots_is_decided_per_slot_group() {
    let cluster = RedisCluster::start();
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    let policies = vec![
        named("per-ip", FixedWindow::new(10, 60 * NANOS_PER_SEC).unwrap().into()),
        named("per-account", TokenBucket::new(1, 1.0).unwrap().into()),
    ];
    let mut o = RedisOptions::cluster(cluster.urls(), OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.deny_cache_entries = 0;
    o.timeout = Duration::from_secs(5);
    let s = RedisStore::new(policies, o).expect("valid store");

    // Three keys whose slots live on three different nodes.
    let h = KeyHasher::from_secret(b"cluster");
    let mut keys: Vec<KeyHash> = Vec::new();
    let mut ports = HashSet::new();
    for i in 0u32.. {
        let k = h.hash(&[&i.to_le_bytes()]);
        let stored = s.stored_key(&Check { policy: 0, key: k, cost: 1 }).unwrap();
        let slot = key_slot(stored.as_bytes());
        let cli_slot = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", &stored]);
        assert_eq!(cli_slot, slot.to_string(), "our slot of {stored} is the server's");
        if ports.insert(cluster.node_of_slot(slot).port) {
            keys.push(k);
        }
        if keys.len() == 3 {
            break;
        }
    }
    let (a, b, c) = (keys[0], keys[1], keys[2]);
    // The start-up check reads the memory policy of a Cluster too.
    assert_eq!(s.maxmemory_policy().await.as_deref(), Ok("noeviction"));
    // a under both policies shares one slot (the tag is the key hash): three groups in all.
    let request = [
        Check { policy: 0, key: a, cost: 1 },
        Check { policy: 1, key: a, cost: 1 },
        Check { policy: 1, key: b, cost: 1 },
        Check { policy: 0, key: c, cost: 1 },
    ];
    let first = s.decide_detailed(&request, Some(T)).await.unwrap();
    assert_eq!(first.source, Source::Redis);
    assert!(first.verdict.allowed);
    assert_eq!(first.verdict.decisions.iter().map(|d| d.remaining).collect::<Vec<_>>(), [9, 0, 0, 9]);
    // Each key is held by the node that serves its slot.
    for check in &request {
        let stored = s.stored_key(check).unwrap();
        let node = cluster.node_of_slot(key_slot(stored.as_bytes()));
        assert_eq!(node.cli(&["EXISTS", &stored]), "1", "{stored} on port {}", node.port);
    }

    let calls = s.stats().redis_calls;
    let second = s.decide_detailed(&request, Some(T)).await.unwrap();
    assert_eq!(s.stats().redis_calls - calls, 3, "one call per slot group");
    assert!(!second.verdict.allowed, "the account buckets are empty");
    let allowed: Vec<bool> = second.verdict.decisions.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, [true, false, false, true]);

    // Group a (both of a's checks) denied as a whole: a's window not charged. Group c admitted
    // on its own node and was charged: a Cluster may over-count a denied request, in the strict
    // direction only.
    let ip_only = |k| [Check { policy: 0, key: k, cost: 1 }];
    let a_now = s.decide_detailed(&ip_only(a), Some(T)).await.unwrap().verdict.decisions[0].remaining;
    let c_now = s.decide_detailed(&ip_only(c), Some(T)).await.unwrap().verdict.decisions[0].remaining;
    assert_eq!((a_now, c_now), (8, 7));

    // The first request's charges settled across its three slot groups, one call per group:
    // a's and c's per-ip units given back, b's account charged two more than it reserved.
    assert_eq!(first.verdict.charged_at(3), T, "every group decided at the time it was given");
    let settle = |i: usize, actual| Settle { check: request[i], charged_at: first.verdict.charged_at(i), actual };
    let before = s.stats();
    s.settle_charges(&[settle(0, 0), settle(2, 3), settle(3, 0)], Some(T)).await.unwrap();
    let after = s.stats();
    // Each node is sent the settlement script's source once (NOSCRIPT, then EVAL).
    assert_eq!(after.script_reloads - before.script_reloads, 3);
    assert_eq!(after.redis_calls - before.redis_calls - 3, 3, "one settlement call per slot group");
    let left = |k, policy| {
        let s = &s;
        async move {
            let v = s.decide_detailed(&[Check { policy, key: k, cost: 0 }], Some(T)).await.unwrap().verdict;
            (v.decisions[0].remaining, v.decisions[0].retry_after)
        }
    };
    assert_eq!(left(a, 0).await.0, 9);
    assert_eq!(left(c, 0).await.0, 8);
    // b's bucket of one: empty, and one more owed (a debt is at most one capacity): a question
    // that costs nothing waits out the debt (1 s), a request of one 2 s.
    assert_eq!(left(b, 1).await, (0, NANOS_PER_SEC));
    let denied = s.decide_detailed(&[Check { policy: 1, key: b, cost: 1 }], Some(T)).await.unwrap().verdict;
    assert_eq!(denied.decisions[0].retry_after, 2 * NANOS_PER_SEC);
    assert_eq!(s.stats().redis_errors, 0);
}
