//! `lease = "auto"` through the binary: two `sluice serve` gateways on one real Redis, one hot
//! key (every client shares it), loaded from several connections each. Under a limit the load
//! exceeds, the two admit no more than the limit between them; under one it never reaches,
//! Redis runs far fewer scripts than there are requests (its own `INFO commandstats`), against
//! one script a request with `lease = "off"`. And the first again on a Redis Cluster, and both
//! for a token bucket, whose leases are holds (`Store::hold`).

#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_support::{RedisCluster, RedisServer};
use support::{Serve, TempDir, fleet_config};

/// Connections per gateway.
const CLIENTS: usize = 6;

/// Keep-alive GETs on `port` until `stop`: (requests, 200s).
fn load(
    port: u16,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    admitted: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while !stop.load(Ordering::Relaxed) {
            writer.write_all(b"GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
            let mut length = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            sent.fetch_add(1, Ordering::Relaxed);
            if status == 200 {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// What a run saw: requests, 200s, scripts Redis ran meanwhile, and the requests the gateways
/// say they admitted from leases (`sluice_lease_admissions_total`, summed).
struct Run {
    sent: u64,
    admitted: u64,
    scripts: u64,
    from_leases: f64,
    /// Units the gateways' leases held when the load stopped (`sluice_lease_units_held`).
    held_at_stop: f64,
    /// How long after the load stopped they held none (given back, the keys quiet), if within
    /// 5 s.
    quiet_after: Option<Duration>,
}

/// Two gateways with `limit` and `lease` on a new Redis, loaded for `millis`, inside one
/// hour-long window.
fn run(limit: u64, lease: &str, millis: u64) -> Run {
    let redis = RedisServer::start();
    let config = fleet_config(&redis.url(), limit, "1h", lease, "");
    run_on(&config, || redis.scripts_run(), millis)
}

/// Two gateways configured by `config`, loaded for `millis`, inside one hour-long window
/// (a run across the top of the hour, two windows, is run again); `scripts` reads how many
/// scripts Redis has run.
fn run_on(config: &str, scripts: impl Fn() -> u64, millis: u64) -> Run {
    loop {
        let dir = TempDir::new("redis-leases");
        let path = dir.write("gateway.toml", config);
        let gateways = [Serve::gateway(&path), Serve::gateway(&path)];
        let hour = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600;
        let started_in = hour();
        let before = scripts();
        let (stop, sent, admitted) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::<AtomicU64>::default());
        let threads: Vec<_> = gateways
            .iter()
            .flat_map(|g| (0..CLIENTS).map(|_| load(g.port, stop.clone(), Arc::clone(&sent), Arc::clone(&admitted))))
            .collect();
        std::thread::sleep(Duration::from_millis(millis));
        stop.store(true, Ordering::Relaxed);
        threads.into_iter().for_each(|t| t.join().unwrap());
        if hour() != started_in {
            continue;
        }
        let scripts = scripts() - before;
        let metric = |name: &str| -> f64 { gateways.iter().map(|g| support::raw::metric_sum(g.admin(), name)).sum() };
        let from_leases = metric("sluice_lease_admissions_total");
        let (sent, admitted) = (sent.load(Ordering::Relaxed), admitted.load(Ordering::Relaxed));
        let (stopped, held_at_stop) = (Instant::now(), metric("sluice_lease_units_held"));
        let quiet_after = loop {
            if metric("sluice_lease_units_held") == 0.0 {
                break Some(stopped.elapsed());
            }
            if stopped.elapsed() > Duration::from_secs(5) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        return Run { sent, admitted, scripts, from_leases, held_at_stop, quiet_after };
    }
}

/// The fleet's configuration with a token bucket of `capacity` refilled at `rate` a second in
/// place of its window.
fn bucket_config(redis: &str, capacity: u64, rate: u64) -> String {
    let window = "algorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1h\"";
    let config = fleet_config(redis, 1, "1h", "auto", "");
    assert!(config.contains(window), "{config}");
    config.replace(window, &format!("algorithm = \"token-bucket\"\ncapacity = {capacity}\nrefill_per_second = {rate}"))
}

#[test]
fn two_gateways_leasing_one_hot_bucket_admit_no_more_than_it_holds() {
    const CAPACITY: u64 = 2_000;
    const RATE: u64 = 20;
    let redis = RedisServer::start();
    let started = Instant::now();
    let Run { sent, admitted, scripts, from_leases, .. } =
        run_on(&bucket_config(&redis.url(), CAPACITY, RATE), || redis.scripts_run(), 2_500);
    // Every admission falls between the gateways' start and now: the bucket's bound over that.
    let bound = CAPACITY + RATE * started.elapsed().as_secs().saturating_add(1);
    println!(
        "token bucket {CAPACITY}, {RATE}/s, lease auto: {sent} requests, {admitted} admitted (bound {bound}), \
         {from_leases} from leases, {scripts} scripts"
    );
    assert!(sent > bound * 2, "the load must exceed the bucket: {sent} requests");
    assert!(admitted <= bound, "{admitted} admitted between the two, the bucket's bound is {bound}");
    assert!(admitted * 10 >= CAPACITY * 8, "only {admitted} of {CAPACITY} admitted");
    assert!(from_leases >= admitted as f64 / 2.0, "{from_leases} of {admitted} admissions from leases");
}

#[test]
fn bucket_leases_spare_redis_a_script_a_request() {
    let redis = RedisServer::start();
    let on = run_on(&bucket_config(&redis.url(), 100_000_000, 1_000_000), || redis.scripts_run(), 1_500);
    println!(
        "token bucket never emptied, lease auto: {} requests, {} scripts, {} from leases",
        on.sent, on.scripts, on.from_leases
    );
    assert_eq!(on.admitted, on.sent, "a bucket never emptied admits all");
    assert!(on.scripts * 10 <= on.sent, "with leases: {} scripts for {} requests", on.scripts, on.sent);
    assert!(on.from_leases >= on.sent as f64 * 0.9 - 1.0, "{} of {} from leases", on.from_leases, on.sent);
    // Quiet holds are released within two of the timer's ticks.
    assert!(on.quiet_after.is_some_and(|d| d <= Duration::from_secs(3)), "still held: {:?}", on.quiet_after);
}

#[test]
fn two_gateways_leasing_one_hot_key_admit_no_more_than_its_limit() {
    const LIMIT: u64 = 2_000;
    let Run { sent, admitted, scripts, .. } = run(LIMIT, "auto", 2_500);
    println!("lease auto, limit {LIMIT}: {sent} requests, {admitted} admitted, {scripts} scripts");
    assert!(sent > LIMIT * 2, "the load must exceed the limit: {sent} requests");
    assert!(admitted <= LIMIT, "{admitted} admitted between the two, the limit is {LIMIT}");
    // What the leases still held unspent when the run stopped is all that can be missing.
    assert!(admitted * 10 >= LIMIT * 8, "only {admitted} of {LIMIT} admitted");
}

#[test]
fn on_a_redis_cluster_two_leasing_gateways_admit_no_more_than_its_limit() {
    const LIMIT: u64 = 2_000;
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let list: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let config = fleet_config(&urls[0], LIMIT, "1h", "auto", "")
        .replace(&format!("url = \"{}\"", urls[0]), &format!("urls = [{}]\ncluster = true", list.join(", ")));
    assert!(config.contains("cluster = true"), "{config}");
    let scripts = || cluster.nodes.iter().map(RedisServer::scripts_run).sum::<u64>();
    let Run { sent, admitted, scripts, from_leases, .. } = run_on(&config, scripts, 2_500);
    println!(
        "Cluster, lease auto, limit {LIMIT}: {sent} requests, {admitted} admitted, {from_leases} from leases, {scripts} scripts"
    );
    assert!(sent > LIMIT * 2, "the load must exceed the limit: {sent} requests");
    assert!(admitted <= LIMIT, "{admitted} admitted between the two, the limit is {LIMIT}");
    assert!(admitted * 10 >= LIMIT * 8, "only {admitted} of {LIMIT} admitted");
    assert!(from_leases >= admitted as f64 / 2.0, "{from_leases} of {admitted} admissions from leases");
}

#[test]
fn leases_spare_redis_a_script_a_request() {
    const NEVER: u64 = 100_000_000;
    let off = run(NEVER, "off", 1_500);
    let on = run(NEVER, "auto", 1_500);
    println!(
        "lease off: {} requests, {} scripts; lease auto: {} requests, {} scripts, {} from leases",
        off.sent, off.scripts, on.sent, on.scripts, on.from_leases
    );
    assert_eq!((off.admitted, on.admitted), (off.sent, on.sent), "a limit never reached admits all");
    assert!(off.scripts >= off.sent, "without leases a script a request: {} for {}", off.scripts, off.sent);
    assert!(on.scripts * 10 <= on.sent, "with leases: {} scripts for {} requests", on.scripts, on.sent);
    // The gateways' own count says the same: most admissions came from leases; none without.
    assert_eq!(off.from_leases, 0.0);
    assert!(on.from_leases >= on.sent as f64 * 0.9 - 1.0, "{} of {} from leases", on.from_leases, on.sent);
    // Once the load stops, the leases still holding units are given back within two of the
    // timer's one-second ticks, not left until the hour's window ends.
    println!("held when the load stopped: {}; none after {:?}", on.held_at_stop, on.quiet_after);
    assert!(on.held_at_stop > 0.0, "the leases held units when the load stopped");
    assert!(on.quiet_after.is_some_and(|d| d <= Duration::from_secs(3)), "still held: {:?}", on.quiet_after);
}
