//! `sluice simulate` as a user runs it: the built binary, its output formats and files.

use std::process::{Command, Output};

use serde_json::Value;

mod support;

use support::{SLUICE, TempDir};

fn sluice(args: &[&str]) -> Output {
    Command::new(SLUICE).arg("simulate").args(args).output().expect("run the sluice binary")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(out.status.success(), "sluice simulate {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&stdout_ok(&all)).expect("valid JSON on stdout")
}

fn result<'a>(v: &'a Value, algorithm: &str) -> &'a Value {
    v["results"].as_array().unwrap().iter().find(|r| r["algorithm"] == algorithm).unwrap()
}

#[test]
fn defaults_reproduce_the_article_table_exactly() {
    // The article: 184 requests; fixed window 178 allowed, 6 rejected (96.74%); sliding window
    // counter 178 (96.74%); token bucket 184 (100%); leaky bucket 184 (100%).
    let v = json(&[]);
    assert_eq!(v["requests"], 184);
    assert_eq!(
        (v["scenario"].as_str(), v["seed"].as_u64(), v["generator"].as_str()),
        (Some("poisson"), Some(42), Some("python"))
    );
    let row = |a: &str| {
        let r = result(&v, a);
        (
            r["allowed"].as_u64().unwrap(),
            r["rejected"].as_u64().unwrap(),
            format!("{:.2}%", r["allowed_ratio"].as_f64().unwrap() * 100.0),
        )
    };
    assert_eq!(row("fixed-window"), (178, 6, "96.74%".to_string()));
    assert_eq!(row("sliding-window"), (178, 6, "96.74%".to_string()));
    assert_eq!(row("token-bucket"), (184, 0, "100.00%".to_string()));
    assert_eq!(row("leaky-bucket"), (184, 0, "100.00%".to_string()));
    // Not in the article: the exact log holds to 10 in every second.
    assert_eq!(row("sliding-log"), (174, 10, "94.57%".to_string()));

    let table = stdout_ok(&[]);
    assert_eq!(
        table,
        "poisson: 184 requests in 30s at 6 req/s, seed 42 (python generator)\n\
         windows: 10 per 1s; buckets: capacity 20, 10 per second\n\
         algorithm       allowed  rejected  allowed %  max in 1s\n\
         fixed-window        178         6     96.74%         13\n\
         sliding-log         174        10     94.57%         10\n\
         sliding-window      178         6     96.74%         13\n\
         token-bucket        184         0    100.00%         15\n\
         leaky-bucket        184         0    100.00%         15\n"
    );
    assert_eq!(stdout_ok(&["--generator", "python"]), table);
}

#[test]
fn the_xoshiro_generator_keeps_its_numbers() {
    let v = json(&["--generator", "xoshiro"]);
    let n = v["requests"].as_u64().unwrap();
    assert_eq!(n, 182);
    assert_eq!(v["scenario"], "poisson");
    assert_eq!(v["seed"], 42);
    assert_eq!(v["generator"], "xoshiro");
    assert_eq!(v["parameters"]["limit"], 10);
    assert_eq!(v["parameters"]["capacity"], 20);
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    assert_eq!(names, ["fixed-window", "sliding-log", "sliding-window", "token-bucket", "leaky-bucket"]);
    for r in results {
        let (a, rej) = (r["allowed"].as_u64().unwrap(), r["rejected"].as_u64().unwrap());
        assert_eq!(a + rej, n);
        assert!((r["allowed_ratio"].as_f64().unwrap() - a as f64 / n as f64).abs() < 1e-12);
        assert!(r["max_in_window"].as_u64().unwrap() >= 10);
    }
    let allowed: Vec<u64> = results.iter().map(|r| r["allowed"].as_u64().unwrap()).collect();
    assert_eq!(allowed, [179, 178, 177, 182, 182]);
    for bucket in ["token-bucket", "leaky-bucket"] {
        assert_eq!(result(&v, bucket)["rejected"], 0);
    }
    for window in ["fixed-window", "sliding-log", "sliding-window"] {
        assert!(result(&v, window)["rejected"].as_u64().unwrap() > 0);
    }
    assert!(
        stdout_ok(&["--generator", "xoshiro"])
            .starts_with("poisson: 182 requests in 30s at 6 req/s, seed 42 (xoshiro generator)\n")
    );
}

#[test]
fn durations_take_every_unit_and_need_one() {
    // A day at one request a minute: `1d` is the same duration here as in `serve --drain`.
    let v = json(&["--duration", "1d", "--rps", "0.0166", "--algorithms", "token-bucket"]);
    assert_eq!(v["duration_seconds"], 86_400.0);
    assert!((1_300..1_600).contains(&v["requests"].as_u64().unwrap()), "{}", v["requests"]);
    assert_eq!(json(&["--duration", "1.5min", "--window", "500ms"])["duration_seconds"], 90.0);
    for (flag, value) in [("--duration", "30"), ("--window", "1")] {
        let out = sluice(&[flag, value]);
        assert!(!out.status.success(), "{flag} {value} should be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("`{value}` has no unit: write e.g. `{value}s`")), "{err}");
    }
}

#[test]
fn the_same_seed_prints_the_same_report() {
    let args = ["--format", "json", "--scenario", "botnet", "--clients", "50", "--seed", "9"];
    assert_eq!(stdout_ok(&args), stdout_ok(&args));
    assert_ne!(stdout_ok(&args), stdout_ok(&["--format", "json", "--scenario", "botnet", "--clients", "50"]));
}

#[test]
fn boundary_table_shows_the_fixed_window_doubling() {
    let table = stdout_ok(&["--scenario", "boundary", "--algorithms", "fixed-window,sliding-log"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("boundary: 160 requests in 30s"), "{table}");
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["algorithm", "allowed", "rejected", "allowed", "%", "max", "in", "1s"]
    );
    assert_eq!(lines[3].split_whitespace().last(), Some("20"), "{table}");
    assert_eq!(lines[4].split_whitespace().last(), Some("10"), "{table}");
}

#[test]
fn csv_lists_every_algorithm_and_key() {
    let csv = stdout_ok(&["--format", "csv", "--scenario", "nat", "--algorithms", "sliding-log,token-bucket"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "algorithm,keyed_by,allowed,rejected,allowed_ratio,max_in_window");
    let keys: Vec<(&str, &str)> = lines[1..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0], f[1])
        })
        .collect();
    assert_eq!(
        keys,
        [("sliding-log", "ip"), ("sliding-log", "account"), ("token-bucket", "ip"), ("token-bucket", "account")]
    );
}

#[test]
fn arrivals_file_with_keys_and_exact_times() {
    let dir = TempDir::new("file");
    let file = dir.path("arrivals.txt");
    // Client a sends 3 within a second, client b 1; the limit is 2 per second per client.
    std::fs::write(&file, "# time client\n0.1 a\n0.2, a\n\n0.300000001 a\n0.5 b # other client\n1.1 a\n").unwrap();
    let v = json(&["--arrivals", &file, "--limit", "2", "--algorithms", "sliding-log,fixed-window"]);
    assert_eq!(v["requests"], 5);
    assert_eq!(v["arrivals_file"], file.as_str());
    assert!(v.get("seed").is_none());
    let log = result(&v, "sliding-log");
    assert_eq!(log["keyed_by"], "ip");
    // a: 0.1 ok, 0.2 ok, 0.3 denied, 1.1 ok (0.1 has left the window); b: ok.
    assert_eq!((log["allowed"].as_u64(), log["rejected"].as_u64()), (Some(4), Some(1)));
    assert_eq!(result(&v, "fixed-window")["allowed"], 4);
}

#[test]
fn bad_arrivals_files_name_the_line() {
    let dir = TempDir::new("bad");
    let file = dir.path("bad.txt");
    std::fs::write(&file, "0.5\n# fine\n0.25\n").unwrap();
    let out = sluice(&["--arrivals", &file]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("earlier than the previous arrival"), "{err}");

    std::fs::write(&file, "0.5\nsoon\n").unwrap();
    let err = String::from_utf8_lossy(&sluice(&["--arrivals", &file]).stderr).to_string();
    assert!(err.contains("line 2: bad time: `soon`"), "{err}");

    let out = sluice(&["--arrivals", &dir.path("missing.txt")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.txt"));
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, needle) in [
        (vec!["--scenario", "flood"], "flood"),
        (vec!["--algorithms", "fixed-window,nope"], "nope"),
        (vec!["--duration", "3 weeks"], "unit"),
        (vec!["--duration", "3w"], "unknown unit `w`"),
        (vec!["--generator", "mt19937"], "mt19937"),
        (vec!["--arrivals", "x.txt", "--generator", "xoshiro"], "cannot be used with"),
        (vec!["--rps", "0"], "rate"),
        (vec!["--limit", "0"], "limit must be at least 1"),
        (vec!["--arrivals", "x.txt", "--seed", "3"], "cannot be used with"),
        (vec!["--algorithms", "sliding-log,sliding-log"], "twice"),
        (vec!["--plot", "figure.gif"], ".svg or .png"),
    ] {
        let out = sluice(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn decisions_and_plots_are_written() {
    let dir = TempDir::new("files");
    let (decisions, png, svg) = (dir.path("d.csv"), dir.path("p.png"), dir.path("p.svg"));
    let v = json(&["--algorithms", "fixed-window,token-bucket", "--decisions", &decisions, "--plot", &png]);
    let n = v["requests"].as_u64().unwrap() as usize;
    let csv = std::fs::read_to_string(&decisions).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "time,key,algorithm,keyed_by,allowed,remaining,retry_after");
    assert_eq!(lines.len(), 1 + 2 * n);
    let denied = lines.iter().filter(|l| l.contains(",fixed-window,") && l.contains(",false,")).count() as u64;
    assert_eq!(denied, result(&v, "fixed-window")["rejected"].as_u64().unwrap());
    let png = std::fs::read(&png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    stdout_ok(&["--scenario", "boundary", "--plot", &svg]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("boundary: 160 requests in 30s"));
    assert!(svg.contains("fixed-window: 160 admitted, 0 rejected"));
}
