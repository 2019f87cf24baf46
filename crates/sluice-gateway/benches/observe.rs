//! What observability adds to a request: counting its decision (pre-resolved counters, two
//! latency histograms) and choosing whether it gets a log line, next to the memory store's
//! decision itself for scale. Logging is off in the bench (no subscriber), so a chosen line costs
//! only its construction.
//!
//! `cargo bench -p sluice-gateway --bench observe`

use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use sluice_core::{ManualClock, NANOS_PER_SEC};
use sluice_gateway::observe::{Observed, Observer, ThreadRandom};
use sluice_gateway::stores::{memory_options, named_policies};
use sluice_http::enforce::{Outcome, PolicyInfo};
use sluice_http::lifecycle::Counted;
use sluice_http::pipeline::Timing;
use sluice_store::{Check, KeyHasher, MemoryStore};

const CONFIG: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 1000000000
refill_per_second = 1000000

[[policy]]
name = "per-key"
algorithm = "fixed-window"
limit = 1000000000
window = "1h"

[[route]]
name = "api"
path = "/api/*"
limits = [{ policy = "per-ip", key = "ip" }, { policy = "per-key", key = "header:x-api-key" }]

[decision_log]
sample = 0.01
denials_per_second = 100
"#;

fn bench(c: &mut Criterion) {
    let config = sluice_config::parse("bench.toml", CONFIG).expect("bench config");
    let clock = Arc::new(ManualClock::new(1_000 * NANOS_PER_SEC));
    let observer = Arc::new(Observer::with_sources(clock.clone(), Arc::new(ThreadRandom)));
    let observed = Observed::resolve(&observer, &config, "memory");
    let policies: Vec<PolicyInfo> = config.policies.iter().map(PolicyInfo::of_config).collect();
    let store = MemoryStore::new(named_policies(&config), memory_options(&config.store), clock);
    let h = KeyHasher::from_secret(b"bench secret, 16 bytes or more");
    let checks = [
        Check { policy: 0, key: h.hash(&[b"ip", b"203.0.113.9"]), cost: 1 },
        Check { policy: 1, key: h.hash(&[b"header", b"k-123"]), cost: 1 },
    ];
    let verdict = store.decide_now(&checks).expect("decides");
    let admitted = Outcome {
        allowed: true,
        decisions: verdict.decisions.clone(),
        describe: verdict.tightest(),
        shadow_denied: Vec::new(),
        soft_over: Vec::new(),
        not_evaluated: Vec::new(),
        degraded: None,
        store_answered: true,
        at: verdict.at,
        at_each: Vec::new(),
    };
    let timing = Timing { decision_ns: 4_000, store_ns: 2_000 };

    let mut g = c.benchmark_group("per request");
    g.bench_function("memory store decision (2 limits), for scale", |b| {
        b.iter(|| black_box(store.decide_now(black_box(&checks)).map(|v| v.allowed)))
    });
    g.bench_function("count an admitted decision (2 limits)", |b| {
        b.iter(|| {
            observed.decided(
                Counted::Route(0, "/api/*"),
                black_box(&checks),
                &[0, 1],
                &policies,
                black_box(&admitted),
                timing,
            )
        })
    });
    g.bench_function("choose a log line for an admitted decision (sample 0.01)", |b| {
        b.iter(|| black_box(observed.pick(black_box(&admitted))))
    });
    let mut denied = admitted.clone();
    denied.allowed = false;
    g.bench_function("choose a log line for a denial over the cap (dropped)", |b| {
        b.iter(|| black_box(observed.pick(black_box(&denied))))
    });
    g.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
