//! `lease = "auto"` (quota leases for hot keys): accepted on a fixed window and a policing bucket
//! over a Redis store,
//! refused, with the file, line, field and why, everywhere it could not keep its promise.

use sluice_config::parse;

const REDIS: &str = "[server]\nkey_secret = \"a long enough shared secret\"\n\n[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\non_error = \"fail-closed\"\n\n";

fn policy(algorithm_and_params: &str, lease: &str) -> String {
    format!("[[policy]]\nname = \"hot\"\n{algorithm_and_params}\nlease = \"{lease}\"\n")
}

const FIXED: &str = "algorithm = \"fixed-window\"\nlimit = 20000\nwindow = \"1s\"";

#[test]
fn a_fixed_window_on_redis_takes_leases() {
    let config = parse("ok.toml", &format!("{REDIS}{}", policy(FIXED, "auto"))).unwrap();
    assert!(config.policies[0].lease);
    let config = parse("ok.toml", &format!("{REDIS}{}", policy(FIXED, "off"))).unwrap();
    assert!(!config.policies[0].lease);
    let calendar = "algorithm = \"fixed-window\"\nlimit = 1000000\nwindow = \"1mo\"\nalign = \"calendar\"";
    assert!(parse("ok.toml", &format!("{REDIS}{}", policy(calendar, "auto"))).unwrap().policies[0].lease);
}

#[test]
fn a_token_bucket_and_a_policing_leaky_bucket_take_leases() {
    let bucket = "algorithm = \"token-bucket\"\ncapacity = 100\nrefill_per_second = 10";
    assert!(parse("ok.toml", &format!("{REDIS}{}", policy(bucket, "auto"))).unwrap().policies[0].lease);
    let police = "algorithm = \"leaky-bucket\"\ncapacity = 100\nrate_per_second = 10";
    assert!(parse("ok.toml", &format!("{REDIS}{}", policy(police, "auto"))).unwrap().policies[0].lease);
    let named = "algorithm = \"leaky-bucket\"\ncapacity = 100\nrate_per_second = 10\nmode = \"police\"";
    assert!(parse("ok.toml", &format!("{REDIS}{}", policy(named, "auto"))).unwrap().policies[0].lease);
}

#[test]
fn leases_are_refused_where_they_could_not_be_exact_or_would_do_nothing() {
    let refused = |text: &str| parse("bad.toml", text).unwrap_err().to_string();
    // The memory store: nothing shared to lease from.
    let e = refused(&policy(FIXED, "auto"));
    assert!(e.starts_with("bad.toml:6: policy[0].lease:") && e.contains("memory store"), "{e}");
    // A shaping bucket delays what a lease would admit at once; sliding windows would let units
    // leave early.
    let shaping = "algorithm = \"leaky-bucket\"\ncapacity = 100\nrate_per_second = 10\nmode = \"shape\"";
    let e = refused(&format!("{REDIS}{}", policy(shaping, "auto")));
    assert!(e.starts_with("bad.toml:15: policy[0].lease:") && e.contains("shapes"), "{e}");
    let sliding = "algorithm = \"sliding-window\"\nlimit = 100\nwindow = \"1m\"";
    let e = refused(&format!("{REDIS}{}", policy(sliding, "auto")));
    assert!(e.contains("policy[0].lease:") && e.contains("cannot be leased exactly"), "{e}");
    let e = refused(&format!("{REDIS}{}", policy(FIXED, "sometimes")));
    assert!(e.contains("policy[0].lease:") && e.contains("`sometimes` is not `auto`"), "{e}");
}
