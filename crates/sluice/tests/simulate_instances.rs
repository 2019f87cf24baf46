//! `sluice simulate --instances N` and several `--access-log`s through the binary: the
//! multi-instance prediction (instances with quota leases over one shared store, against one
//! exact limiter), its refusals, and (with the `external-programs` feature) the prediction
//! against a live run: two `sluice serve` gateways with `lease = "auto"` on one real Redis,
//! each writing its access log, replayed one log per instance.

#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::{SLUICE, TempDir, fleet_config};

fn simulate(args: &[&str]) -> Output {
    Command::new(SLUICE).arg("simulate").args(args).output().expect("run the sluice binary")
}

/// `sluice simulate ARGS --format json`, which must succeed.
fn json(args: &[&str]) -> Value {
    let out = simulate(&[args, &["--format", "json"]].concat());
    assert!(out.status.success(), "sluice simulate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// A JSON access log: `n` GETs of /api/x from `ip`, `every_us` microseconds apart from second
/// `from` (Unix seconds).
fn log(from: u64, n: u64, every_us: u64, ip: &str) -> String {
    (0..n)
        .map(|i| {
            let us = from * 1_000_000 + i * every_us;
            format!(
                "{{\"time\":{}.{:06},\"remote_addr\":\"{ip}\",\"request_method\":\"GET\",\"request_uri\":\"/api/x\"}}\n",
                us / 1_000_000,
                us % 1_000_000
            )
        })
        .collect()
}

/// The top of an hour, Unix seconds.
const HOUR: u64 = 472_223 * 3600;

#[test]
fn four_instances_round_robin_predict_the_exact_count_and_the_store_calls_saved() {
    let dir = TempDir::new("sim-instances");
    let cfg = dir.write("gateway.toml", &fleet_config("redis://127.0.0.1:1", 100, "1s", "auto", ""));
    // 1,000 a second for 5 s on one key, 100 a second allowed.
    let path = dir.write("access.log", &log(HOUR + 10, 5_000, 1_000, "10.0.0.1"));
    let base = ["--config", cfg.as_str(), "--access-log", path.as_str(), "--log-format", "json"];

    // Without --instances the report is the one-store report, unchanged: no prediction in it.
    let one = json(&base);
    assert!(one.get("instances").is_none(), "{one}");
    assert_eq!(one["routes"][0]["admitted"], 500);

    let four = json(&[&base[..], &["--instances", "4"]].concat());
    let p = &four["instances"];
    assert_eq!((p["instances"].as_u64(), p["split"].as_str()), (Some(4), Some("round-robin")), "{p}");
    // Every instance keeps getting requests after its window fills: no unit is stranded, the
    // instances admit what one exact limiter does.
    assert_eq!((p["admitted"].as_u64(), p["admitted_exact"].as_u64()), (Some(500), Some(500)), "{p}");
    assert_eq!((p["under_admitted"].as_i64(), p["over_admitted"].as_u64()), (Some(0), Some(0)), "{p}");
    let limit = &p["limits"][0];
    assert_eq!((limit["policy"].as_str(), limit["leased"].as_bool()), (Some("fleet"), Some(true)), "{p}");
    assert_eq!(p["decisions"], 5_000);
    // After the first second every admission comes from a lease, without the store.
    let from_leases: u64 =
        p["per_instance"].as_array().unwrap().iter().map(|i| i["admitted_from_leases"].as_u64().unwrap()).sum();
    assert_eq!(from_leases, 400, "{p}");
    assert!(p["store_calls"].as_u64() < p["decisions"].as_u64(), "{p}");
    // The rest of the report is the instances' run.
    assert_eq!(four["routes"][0]["admitted"], 500);

    // The table says it in words, with the columns.
    let out = simulate(&[&base[..], &["--instances", "4"]].concat());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("instances: 4, split round-robin, over one shared store"), "{table}");
    assert!(table.contains("under-admitted") && table.contains("over-admitted"), "{table}");
    assert!(!table.contains("OVER-ADMISSION"), "{table}");
}

#[test]
fn several_logs_are_one_instance_each_merged_by_time() {
    let dir = TempDir::new("sim-logs");
    let cfg = dir.write("gateway.toml", &fleet_config("redis://127.0.0.1:1", 500, "1h", "auto", ""));
    // Instance 0: 200 requests in 0.2 s, then nothing; instance 1, a second later: 2,000 a
    // second for half a second. Instance 0 stops holding part of its last lease.
    let a = dir.write("a.log", &log(HOUR + 10, 200, 1_000, "10.0.0.1"));
    let b = dir.write("b.log", &log(HOUR + 11, 1_000, 500, "10.0.0.2"));
    let v = json(&["--config", &cfg, "--access-log", &a, "--access-log", &b, "--log-format", "json"]);
    let p = &v["instances"];
    assert_eq!((p["instances"].as_u64(), p["split"].as_str()), (Some(2), Some("log")), "{p}");
    let held = p["per_instance"][0]["held_at_end"].as_u64().unwrap();
    assert!(held > 0, "{p}");
    assert_eq!(p["per_instance"][0]["requests"], 200);
    assert_eq!(p["per_instance"][1]["requests"], 1_000);
    assert_eq!((p["admitted_exact"].as_u64(), p["admitted"].as_u64()), (Some(500), Some(500 - held)), "{p}");
    assert_eq!(v["requests"], 1_200);
    assert_eq!(v["late"], 0, "merged by time, not one file after the other");
}

#[test]
fn bad_instance_arguments_are_refused_with_a_reason() {
    let dir = TempDir::new("sim-refusals");
    let cfg = dir.write("gateway.toml", &fleet_config("redis://127.0.0.1:1", 5, "1s", "auto", ""));
    let a = dir.write("a.log", &log(HOUR, 3, 1_000, "10.0.0.1"));
    let refused = |args: &[&str], wanted: &str| {
        let out = simulate(&[&["--config", cfg.as_str(), "--log-format", "json"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(wanted), "{args:?}: {err}");
    };
    refused(&["--access-log", &a, "--access-log", &a, "--split", "client"], "--split is for one log");
    refused(&["--access-log", &a, "--access-log", &a, "--instances", "3"], "--instances 3 with 2 logs");
    refused(&["--access-log", &a, "--split", "client"], "--split needs --instances");
    refused(&["--access-log", &a, "--instances", "0"], "at least one instance");
    refused(&["--access-log", &a, "--instances", "2", "--format", "csv"], "use --format table or json");
    refused(&["--access-log", "-", "--access-log", "-"], "standard input can be read once");
    refused(&["--access-log", &a, "--regions"], "--regions needs --instances N, or one --access-log per region");
    refused(&["--access-log", &a, "--instances", "2", "--trade-every", "1s"], "--regions");
}

/// The live run against the prediction: two gateways, one Redis, one log each.
#[cfg(feature = "external-programs")]
mod live {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use super::redis_support::RedisServer;

    use super::json;
    use super::support::fleet_config;
    use super::support::{Serve, TempDir};

    /// A keep-alive connection to a gateway.
    struct Client {
        writer: TcpStream,
        reader: BufReader<TcpStream>,
    }

    impl Client {
        fn new(port: u16) -> Self {
            let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            Self { writer: stream.try_clone().unwrap(), reader: BufReader::new(stream) }
        }

        /// GET /api/x: its status.
        fn get(&mut self) -> u16 {
            self.writer.write_all(b"GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
            let mut length = 0;
            loop {
                let mut h = String::new();
                self.reader.read_line(&mut h).unwrap();
                if h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            self.reader.read_exact(&mut body).unwrap();
            status
        }
    }

    /// Waits until `path` has `n` lines (a gateway writes a line as each response ends).
    fn wait_for_lines(path: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = std::fs::read_to_string(path).unwrap_or_default().lines().count();
            if lines >= n {
                assert_eq!(lines, n, "{path}: one line a request");
                return;
            }
            assert!(Instant::now() < deadline, "{path}: {lines} lines of {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Requests sent by gateway A's one client, all inside a second (so that its lease sizes
    /// depend on the count alone, as in the simulation).
    const BURST: usize = 400;
    /// The fixed window's limit (an hour long: the whole run is one window).
    const LIMIT: u64 = 1_500;
    /// Gateway B's connections.
    const B_CLIENTS: usize = 4;
    /// Each of B's connections stops after this many 429s.
    const B_DENIALS: usize = 50;
    /// B's part ends within this of A's last answer, so that A still holds its last lease (a
    /// gateway gives a lease back once its key has been quiet a second).
    const QUIET_BOUND: Duration = Duration::from_millis(900);

    /// What a live run admitted, and what the simulation of its two logs predicted.
    struct Measured {
        live_a: u64,
        live_b: u64,
        sent: u64,
        report: serde_json::Value,
    }

    fn run_once(a_clients: usize) -> Option<Measured> {
        let redis = RedisServer::start();
        let dir = TempDir::new("sim-live");
        let (log_a, log_b) = (dir.path("a.log"), dir.path("b.log"));
        let section = |log: &str| format!("[access_log]\npath = \"{log}\"\nformat = \"json\"");
        let cfg_a = dir.write("a.toml", &fleet_config(&redis.url(), LIMIT, "1h", "auto", &section(&log_a)));
        let cfg_b = dir.write("b.toml", &fleet_config(&redis.url(), LIMIT, "1h", "auto", &section(&log_b)));
        let (a, b) = (Serve::gateway(&cfg_a), Serve::gateway(&cfg_b));
        let hour = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600;
        let started_in = hour();

        // A: a burst (it leases once it sees 50 a second), then silence: its last lease's
        // unspent units stay counted in Redis until A has been quiet a second (then it gives
        // them back on its next one-second tick, at a moment no replay can know): B's part must
        // end before that.
        let burst: Vec<_> = (0..a_clients)
            .map(|_| {
                let port = a.port;
                std::thread::spawn(move || {
                    let mut client = Client::new(port);
                    (0..BURST / a_clients).filter(|_| client.get() == 200).count() as u64
                })
            })
            .collect();
        let live_a = burst.into_iter().map(|t| t.join().unwrap()).sum();
        let a_quiet = Instant::now();
        // B: several connections until each has been denied a while: the window is full.
        let threads: Vec<_> = (0..B_CLIENTS)
            .map(|_| {
                let port = b.port;
                std::thread::spawn(move || {
                    let mut client = Client::new(port);
                    let (mut sent, mut admitted, mut denied) = (0u64, 0u64, 0);
                    while denied < B_DENIALS {
                        sent += 1;
                        match client.get() {
                            200 => admitted += 1,
                            429 => denied += 1,
                            other => panic!("status {other}"),
                        }
                    }
                    (sent, admitted)
                })
            })
            .collect();
        let (mut sent, mut live_b) = (BURST as u64, 0);
        for t in threads {
            let (s, ad) = t.join().unwrap();
            sent += s;
            live_b += ad;
        }
        if hour() != started_in {
            return None; // across the top of the hour: two windows
        }
        if a_quiet.elapsed() >= QUIET_BOUND {
            println!("B took {:?} after A went quiet: A may have given its lease back; run again", a_quiet.elapsed());
            return None;
        }
        wait_for_lines(&log_a, BURST);
        wait_for_lines(&log_b, (sent - BURST as u64) as usize);
        let report =
            json(&["--config", &cfg_a, "--access-log", &log_a, "--access-log", &log_b, "--log-format", "json"]);
        Some(Measured { live_a, live_b, sent, report })
    }

    /// Runs until a run falls inside one hour; prints and checks what every run must show.
    /// Returns (live, predicted, exact, held by A at the end), admitted requests.
    fn measure(a_clients: usize) -> (u64, u64, u64, u64, serde_json::Value) {
        let m = std::iter::repeat_with(|| run_once(a_clients))
            .take(5)
            .flatten()
            .next()
            .expect("five runs each crossed the hour or took B longer than QUIET_BOUND after A went quiet");
        let p = m.report["instances"].clone();
        let live = m.live_a + m.live_b;
        let predicted = p["admitted"].as_u64().unwrap();
        let exact = p["admitted_exact"].as_u64().unwrap();
        let held = p["per_instance"][0]["held_at_end"].as_u64().unwrap();
        println!(
            "A with {a_clients} connections: live {live} admitted of {} ({} by A, {} by B); predicted with leases: \
             {predicted} ({} by A, {} by B, A holding {held}); one exact limiter: {exact}; store calls per decision: {}",
            m.sent,
            m.live_a,
            m.live_b,
            p["per_instance"][0]["admitted"],
            p["per_instance"][1]["admitted"],
            p["store_calls_per_decision"],
        );
        // Every live request is in the logs, and the simulation decided each.
        assert_eq!(m.report["requests"].as_u64(), Some(m.sent), "{}", m.report);
        assert_eq!(p["per_instance"][0]["requests"].as_u64(), Some(BURST as u64), "{p}");
        assert_eq!(p["over_admitted"], 0, "{p}");
        // The load exceeds the limit: one exact limiter admits it exactly; live, A admitted its
        // whole burst, and what it still held was admitted by no one.
        assert_eq!(exact, LIMIT, "{p}");
        assert_eq!(m.live_a, BURST as u64);
        assert!(live <= LIMIT, "{live} admitted live, the limit is {LIMIT}");
        (live, predicted, exact, held, p)
    }

    #[test]
    fn the_prediction_of_two_leasing_gateways_matches_their_live_run() {
        let (live, predicted, exact, held, p) = measure(1);
        // A's lease sizes follow its request count alone (one connection, within a second),
        // the same live and replayed, so what A strands is predicted to the unit; B strands
        // nothing (it is denied last). Measured: the same figure live and predicted in every
        // run (1,465 admitted of 1,500); 10 is one early lease of margin.
        const TOLERANCE: u64 = 10;
        assert!(predicted.abs_diff(live) <= TOLERANCE, "predicted {predicted}, live {live}: {p}");
        // A simulator ignoring the leases (or sending A's requests and B's to one instance, which
        // spends A's units on B's requests) would predict the exact count.
        assert!(held > TOLERANCE && predicted == exact - held, "{p}");
    }

    /// With A's burst from four connections at once, a request that comes while A's lease is
    /// being taken waits for it (and counts once in A's rate, as in the replay, which decides
    /// one request at a time); which request takes each lease still varies from run to run, so
    /// where A's last lease starts, and what it strands, may too. Live, in eight runs: six
    /// admitted exactly the predicted 1,465 (35 stranded), two 1,486 and 1,491. Before requests
    /// waited (they went to the store on their own): 1,466 to 1,499 in seven runs. Both are part
    /// of one lease, whose size is a tenth of A's count of the second: at most 44 (400 requests,
    /// and one more count per lease taken, about 25). That bounds the prediction's error here.
    #[test]
    fn with_concurrent_connections_the_prediction_is_within_one_lease() {
        let (live, predicted, exact, held, p) = measure(4);
        const ONE_LEASE: u64 = 44;
        assert!(held <= ONE_LEASE && exact - live <= ONE_LEASE, "live {live}, exact {exact}: {p}");
        assert!(predicted.abs_diff(live) <= ONE_LEASE, "predicted {predicted}, live {live}: {p}");
    }
}
