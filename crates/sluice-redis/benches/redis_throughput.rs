//! Redis decisions per second and latency, sluice against `redis-benchmark` running the same
//! script with `EVALSHA` at the same concurrency, in the same run, on the same server.
//!
//! `cargo bench -p sluice-redis --bench redis_throughput` (needs redis-server and
//! redis-benchmark: apt-get install redis-server). `SLUICE_BENCH_SECS` sets each run's length
//! (default 3 s); `SLUICE_BENCH_CONCURRENCY` a comma-separated list (default 1,8,32);
//! `SLUICE_BENCH_RUNTIME=per-core` runs sluice's tasks on a current-thread runtime per core, as
//! the gateway does, instead of one multi-thread runtime of two workers.
//! `SLUICE_BENCH_SETTLE=1` measures a reservation instead of a decision: each request reserves
//! 2 (the decision script) and is settled to 1 (the settlement script, giving one back), and
//! redis-benchmark runs each script on its own: their combined rate, `1 / (1/a + 1/b)`, is what
//! two round trips cost on the server.
//! `SLUICE_BENCH_REDIS_RS=1` also runs a store on redis-rs's multiplexed connection (a driver
//! task, replies read into redis-rs's value tree) in the same run, for comparison with the lean
//! connection: the URL asks for RESP3, the one way a single TCP node takes that path; the
//! decision script's replies are the same bytes in RESP2 and RESP3.
//!
//! Both sides decide one token-bucket check (capacity 100, 100 per second) on keys drawn from
//! 100,000, so nearly every decision is an admission that writes its key. sluice runs N tasks
//! on one store (one lean connection per runtime thread, as in a gateway); redis-benchmark runs
//! N connections.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source, script_sha, settle_sha};
use sluice_store::{Check, KeyHash, NamedPolicy, Settle, Store};
use support::RedisServer;

const KEYSPACE: u64 = 100_000;

/// `SLUICE_BENCH_SETTLE=1`: each request a reservation of 2 settled to 1.
fn settling() -> bool {
    static SETTLE: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("SLUICE_BENCH_SETTLE").is_ok_and(|v| v == "1"));
    *SETTLE
}

struct Figures {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn key(n: u64) -> KeyHash {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    KeyHash(k)
}

/// The runtimes sluice's tasks run on: one multi-threaded runtime of two workers, or one
/// current-thread runtime per core, each on its own thread and running all along, as the
/// gateway runs them (`SLUICE_BENCH_RUNTIME=per-core`).
enum Runtimes {
    MultiThread(tokio::runtime::Runtime),
    PerCore(Vec<tokio::sync::mpsc::UnboundedSender<Job>>),
}

/// Tasks for one worker of [`Runtimes::PerCore`], and where their latencies go.
struct Job {
    store: Arc<RedisStore>,
    ids: Vec<usize>,
    began: Instant,
    length: Duration,
    done: std::sync::mpsc::Sender<Vec<Duration>>,
}

impl Runtimes {
    fn new(per_core: bool) -> Self {
        if !per_core {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
            return Runtimes::MultiThread(rt.expect("runtime"));
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let workers = (0..cores)
            .map(|_| {
                let (jobs, mut inbox) = tokio::sync::mpsc::unbounded_channel::<Job>();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    rt.block_on(async {
                        while let Some(job) = inbox.recv().await {
                            let latencies = tasks(job.store, job.ids, job.began, job.length).await;
                            let _ = job.done.send(latencies);
                        }
                    });
                });
                jobs
            })
            .collect();
        Runtimes::PerCore(workers)
    }

    fn name(&self) -> &'static str {
        match self {
            Runtimes::MultiThread(_) => "one multi-thread runtime of 2 workers",
            Runtimes::PerCore(_) => "a current-thread runtime per core",
        }
    }
}

/// The latencies of tasks `ids`, each deciding one request after another until `length` has
/// passed since `began`, spawned on the current runtime.
async fn tasks(store: Arc<RedisStore>, ids: Vec<usize>, began: Instant, length: Duration) -> Vec<Duration> {
    let tasks: Vec<_> = ids
        .into_iter()
        .map(|t| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = t as u64 * 7_777;
                while began.elapsed() < length {
                    n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    let cost = if settling() { 2 } else { 1 };
                    let check = [Check { policy: 0, key: key((n >> 33) % KEYSPACE), cost }];
                    let start = Instant::now();
                    let outcome = store.decide_detailed(&check, None).await.expect("fail-closed: Redis decided");
                    if settling() && outcome.verdict.allowed {
                        let settle = [Settle { check: check[0], charged_at: outcome.verdict.charged_at(0), actual: 1 }];
                        store.settle(&settle, None).await.expect("fail-closed: Redis settled");
                    }
                    latencies.push(start.elapsed());
                    assert_eq!(outcome.source, Source::Redis);
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("a bench task"));
    }
    all
}

fn sluice_run(runtimes: &Runtimes, store: &Arc<RedisStore>, concurrency: usize, length: Duration) -> Figures {
    let began = Instant::now();
    let mut all = match runtimes {
        Runtimes::MultiThread(rt) => rt.block_on(tasks(Arc::clone(store), (0..concurrency).collect(), began, length)),
        Runtimes::PerCore(workers) => {
            // Spread as the kernel spreads a gateway's connections over its workers.
            let k = workers.len().min(concurrency);
            let (done, results) = std::sync::mpsc::channel();
            for (w, jobs) in workers.iter().take(k).enumerate() {
                let ids = (w..concurrency).step_by(k).collect();
                let job = Job { store: Arc::clone(store), ids, began, length, done: done.clone() };
                assert!(jobs.send(job).is_ok(), "a worker thread ended");
            }
            drop(done);
            results.iter().flatten().collect()
        }
    };
    let secs = began.elapsed().as_secs_f64();
    all.sort_unstable();
    Figures { rps: all.len() as f64 / secs, p50_ms: percentile(&all, 0.5), p99_ms: percentile(&all, 0.99) }
}

/// redis-benchmark with the same script and arguments as the store sends; with
/// `SLUICE_BENCH_SETTLE=1`, the decision script (a reservation of 2) and the settlement script
/// (one unit back) each on its own, combined as one request after the other.
fn redis_benchmark(server: &RedisServer, concurrency: usize, requests: u64) -> Figures {
    let key = "sluice:tb:00000000:{__rand_int__}";
    let decide =
        ["EVALSHA", script_sha(), "1", key, "", "0", "4", "100", "10000", "-1", if settling() { "2" } else { "1" }];
    let figures = redis_benchmark_of(server, concurrency, requests, &decide);
    if !settling() {
        return figures;
    }
    // algorithm, a, b, c as the decision's; charged at 1 us; 1 back, none over.
    let settle = ["EVALSHA", settle_sha(), "1", key, "", "0", "4", "100", "10000", "-1", "1", "1", "0"];
    let then = redis_benchmark_of(server, concurrency, requests, &settle);
    let both = |a: f64, b: f64| a + b;
    Figures {
        rps: 1.0 / (1.0 / figures.rps + 1.0 / then.rps),
        p50_ms: both(figures.p50_ms, then.p50_ms),
        p99_ms: both(figures.p99_ms, then.p99_ms),
    }
}

fn redis_benchmark_of(server: &RedisServer, concurrency: usize, requests: u64, command: &[&str]) -> Figures {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-c", &concurrency.to_string(), "-n", &requests.to_string(), "-r", &KEYSPACE.to_string(), "--csv"])
        .args(command)
        .output()
        .expect("redis-benchmark runs (apt-get install redis-server)");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text.lines().last().unwrap_or_default();
    let cols: Vec<f64> = row.split(',').skip(1).map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN)).collect();
    assert!(cols.len() >= 6, "unexpected redis-benchmark output: {text}");
    Figures { rps: cols[0], p50_ms: cols[3], p99_ms: cols[5] }
}

/// A fail-closed store of the bench's one policy on `url`, without a deny cache.
fn store_at(url: &str) -> Arc<RedisStore> {
    let policy = NamedPolicy { name: "tb".into(), policy: Policy::from(TokenBucket::new(100, 100.0).unwrap()) };
    let mut options = RedisOptions::single(url, OnError::FailClosed);
    options.on_error = OnError::FailClosed;
    options.timeout = Duration::from_secs(5);
    options.deny_cache_entries = 0;
    Arc::new(RedisStore::new(vec![policy], options).expect("valid store"))
}

fn main() {
    let secs: u64 = std::env::var("SLUICE_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let levels: Vec<usize> = std::env::var("SLUICE_BENCH_CONCURRENCY")
        .ok()
        .map(|s| s.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 32]);
    let length = Duration::from_secs(secs);
    let server = RedisServer::start();
    let runtimes = Runtimes::new(std::env::var("SLUICE_BENCH_RUNTIME").is_ok_and(|r| r == "per-core"));

    let store = store_at(&server.url());
    let redis_rs = std::env::var("SLUICE_BENCH_REDIS_RS")
        .is_ok_and(|v| v == "1")
        .then(|| store_at(&format!("{}/?protocol=resp3", server.url())));
    assert_eq!(server.cli(&["SCRIPT", "LOAD", sluice_redis::SCRIPT_SOURCE]), script_sha());
    assert_eq!(server.cli(&["SCRIPT", "LOAD", sluice_redis::SETTLE_SOURCE]), settle_sha());

    let what = if settling() { "reservations (reserve 2, settle to 1)" } else { "decisions" };
    println!(
        "Redis {what}: one token-bucket check per request, {KEYSPACE} keys, {secs} s per run, sluice on {}",
        runtimes.name()
    );
    println!(
        "{:>11} | {:>12} {:>8} {:>8} | {:>15} {:>8} {:>8} | {:>6}",
        "concurrency", "sluice req/s", "p50 ms", "p99 ms", "redis-bench r/s", "p50 ms", "p99 ms", "ratio"
    );
    for &c in &levels {
        // Warm the connection and the script, then measure.
        sluice_run(&runtimes, &store, c, Duration::from_millis(200));
        let ours = sluice_run(&runtimes, &store, c, length);
        let requests = ((ours.rps * secs as f64) as u64).max(10_000);
        let theirs = redis_benchmark(&server, c, requests);
        println!(
            "{:>11} | {:>12.0} {:>8.3} {:>8.3} | {:>15.0} {:>8.3} {:>8.3} | {:>5.2}x",
            c,
            ours.rps,
            ours.p50_ms,
            ours.p99_ms,
            theirs.rps,
            theirs.p50_ms,
            theirs.p99_ms,
            ours.rps / theirs.rps
        );
        if let Some(other) = &redis_rs {
            sluice_run(&runtimes, other, c, Duration::from_millis(200));
            let rs = sluice_run(&runtimes, other, c, length);
            println!(
                "{:>11} | redis-rs multiplexed {:>8.0} req/s, p50 {:.3} ms, p99 {:.3} ms: lean / redis-rs = {:.2}x",
                c,
                rs.rps,
                rs.p50_ms,
                rs.p99_ms,
                ours.rps / rs.rps
            );
        }
    }
}
