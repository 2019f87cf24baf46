//! `/config` ("the configuration after defaults") shows every field the configuration file
//! accepts.
//!
//! The fields accepted are asked of the file's parser itself: it refuses a key it does not know
//! and lists the ones it does. Every table of the configurations below is given an unknown key
//! in turn; each field listed must be set by one of the configurations, and each field they set
//! must show in `/config`. A field added to the parser fails here until both are done.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use sluice_gateway::observe::config_json;

/// The key given to each table to make the parser list the fields it accepts.
const PROBE: &str = "__probe";

/// Fields `/config` shows under another name or in another place: the field as the file spells
/// it (indices left out), and where `/config` shows it. Each `[]` takes the field's next array
/// index; one beyond those matches any element. Unlisted fields show under their own path (a
/// duration with `_ms` appended), `[[policy]]` as `policies` and `[[route]]` as `routes`.
const SHOWN_AS: &[(&str, &str)] = &[
    ("server.key_secret_file", "server.key_secret"),
    ("server.key_secret_env", "server.key_secret"),
    ("server.decision_api", "decision_api.enabled"),
    ("decision_api.token_file", "decision_api.token"),
    ("decision_api.token_env", "decision_api.token"),
    ("identity.jwt.hs256_secret", "identity.jwt.keys[].secret"),
    ("identity.jwt.hs256_secret_file", "identity.jwt.keys[].secret"),
    ("identity.jwt.hs256_secret_env", "identity.jwt.keys[].secret"),
    ("store.url", "store.urls"),
    ("store.snapshot", "store.snapshot.path"),
    ("store.snapshot_interval", "store.snapshot.interval_ms"),
    // A route's cost is its limits' cost unless a limit gives its own.
    ("route.cost", "routes[].limits[].cost"),
    // A limit chosen by plan shows as one limit per plan, each naming its plan.
    ("route.limits.policies", "routes[].limits[].plan"),
    ("route.limits.default_policy", "routes[].limits[].plan"),
];

/// Tables that are maps of names the operator chooses, not fields.
const MAPS: &[&str] = &["route.limits.policies"];

/// Configurations that, together, set every field the file accepts (some exclude others: a
/// secret inline, from a file or from the environment; a memory or a Redis store; Redis's URLs
/// or its Sentinels).
fn configurations(dir: &Path, variable: &str) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    let full = format!(
        r#"
[server]
listen = "127.0.0.1:8080"
trusted_proxies = ["10.0.0.0/8"]
forwarded_header = "forwarded"
ipv6_prefix = 48
headers = ["ietf", "draft-6", "x-ratelimit"]
deny_status = 503
on_deny = "drop"
max_in_flight = 100
user_header = "x-user"
max_body_bytes = 4096
body_timeout = "3s"
body_idle_timeout = "1500ms"
max_body_reads_per_client = 2
max_in_flight_per_client = 7
underscore_headers = "forward"
key_secret = "the key secret of the full configuration"
decision_api = true
h2c = true
workers = 3
tunnel_idle_timeout = "90s"

[server.cors]
allow_origins = ["https://app.example"]
preflight = "answer"
max_age = "5m"

[server.http2]
max_concurrent_streams = 64
max_header_list_size = 8192
max_frame_size = 65536

[server.tls]
cert = "{cert}"
key = "{key}"
client_ca = "{cert}"
client_auth = "optional"

[[server.tls.certificates]]
cert = "{cert}"
key = "{key}"

[upstream]
url = "http://127.0.0.1:9000"
timeout_ms = 2000
timeouts = {{ connect = "500ms", first_byte = "3s", idle = "4s" }}

[[policy]]
name = "window"
algorithm = "sliding-log"
limit = 3
window = "15m"
shadow = true

[[policy]]
name = "bucket"
algorithm = "token-bucket"
capacity = 10
refill_per_second = 2
enforce = "soft"
unit = "tokens"

[[policy]]
name = "leaky"
algorithm = "leaky-bucket"
rate_per_second = 5
capacity = 10
mode = "shape"
delay = 2

[[route]]
name = "reset"
path = "/api/reset"
methods = ["POST"]
cost = 2
exact = true
loosen = ["query"]
upgrades = ["websocket"]
cors = {{ allow_origins = ["*"] }}
upstream = "search"
timeouts = {{ connect = "250ms", first_byte = "90s", idle = "10s" }}
limits = [
  {{ policy = "window", key = ["json:/email", "route"], cost = 1 }},
  {{ key = "jwt:sub|user", policy_by = "jwt:plan", policies = {{ pro = "bucket" }}, default_policy = "leaky", cost_from = "response-header:x-usage" }},
]

[store]
kind = "memory"
max_keys = 1000
shards = 4
when_full = "fold"
fold_width = 64
fold_depth = 2
snapshot = "{snapshot}"
snapshot_interval = "5s"

[admin]
listen = "127.0.0.1:9100"

[decision_api]
allow = ["127.0.0.1/32"]
token = "the decision API token of the full configuration"
max_cost = 5

[decision_log]
sample = 0.5
denials_per_second = 10

[rls]
listen = "127.0.0.1:8081"
descriptors = "{descriptors}"
charge = "independent"
watch_interval = "5s"

[identity.jwt]
hs256_secret = "the HS256 secret of the full configuration"
header = "x-token"
issuer = "https://issuer.example"
audience = "api"
leeway = "10s"
on_invalid_token = "reject"
cache_entries = 100

[[upstreams]]
name = "search"
targets = ["https://127.0.0.1:9444", "https://127.0.0.1:9445"]
balance = "hash"
hash_key = "header:x-user|ip"
ca = "{cert}"
client_cert = "{cert}"
client_key = "{key}"
http2 = true
timeout_ms = 2500
timeouts = {{ connect = "1s", first_byte = "2m", idle = "30s" }}
eject_after = 5
eject_for = "20s"
eject_on_5xx = true
health_check = {{ path = "/ready", interval = "3s", timeout = "1s", healthy_after = 3, unhealthy_after = 4 }}

[forward_auth]
path = "/v1/authz"
deny_status = 403

[access_log]
path = "{access_log}"
format = "json"
client = "hash"
"#,
        access_log = file("access.log"),
        snapshot = file("state"),
        descriptors = file("descriptors"),
        cert = file("cert.pem"),
        key = file("key.pem"),
    );
    let from_files = format!(
        r#"
[server]
key_secret_file = "{key_secret}"

[upstream]
url = "https://127.0.0.1:9443"
ca = "{cert}"
client_cert = "{cert}"
client_key = "{key}"
http2 = true

[decision_api]
token_env = "{variable}"

[store]
kind = "redis"
url = "redis://127.0.0.1:6379"
on_error = "fail-closed"
timeout_ms = 50
key_prefix = "sluice-test"

[identity.jwt]
hs256_secret_env = "{variable}"
jwks_file = "{jwks}"
cookie = "session"

[[policy]]
name = "in-flight"
algorithm = "concurrency"
max_in_flight = 4
lease = "5m"

[[policy]]
name = "monthly"
algorithm = "fixed-window"
limit = 1000
window = "1mo"
align = "calendar"
timezone = "Europe/Kyiv"
lease = "auto"

[[route]]
path = "/v1/chat"
limits = [{{ policy = "in-flight", key = "ip" }}]
"#,
        key_secret = file("key_secret"),
        jwks = file("jwks.json"),
        cert = file("cert.pem"),
        key = file("key.pem"),
    );
    let from_the_environment = format!(
        r#"
[server]
key_secret_env = "{variable}"

[decision_api]
token_file = "{token}"

[store]
kind = "redis"
urls = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
cluster = true
on_error = "local"

[identity.jwt]
hs256_secret_file = "{hs256}"
"#,
        token = file("token"),
        hs256 = file("hs256_secret"),
    );
    let with_sentinels = r#"
[server]
key_secret = "the key secret of the Sentinel configuration"

[store]
kind = "redis"
on_error = "fail-open"
sentinel = { master = "mymaster", urls = ["redis://:pw@127.0.0.1:26379", "redis://:pw@127.0.0.1:26380"] }
"#
    .to_string();
    vec![full, from_files, from_the_environment, with_sentinels]
}

/// One step of a path: a key, and its array index when it names an array of tables.
type Step = (String, Option<usize>);

#[test]
fn config_shows_every_field_the_file_accepts() {
    let dir = std::env::temp_dir().join(format!("sluice-config-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for secret in ["key_secret", "token", "hs256_secret"] {
        std::fs::write(dir.join(secret), format!("the {secret} kept in its own file\n")).unwrap();
    }
    let ed25519 =
        format!(r#"{{"keys": [{{"kty": "OKP", "crv": "Ed25519", "kid": "one", "x": "{}"}}]}}"#, "A".repeat(43));
    std::fs::write(dir.join("jwks.json"), ed25519).unwrap();
    // The file's check reads PEM sections; the certificate itself is read when serving.
    std::fs::write(dir.join("cert.pem"), "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").unwrap();
    std::fs::write(dir.join("key.pem"), "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n").unwrap();
    // Setting a variable in-process needs `unsafe`, which the workspace forbids: any variable
    // long enough to be a secret will do.
    let (variable, _) = std::env::vars()
        .find(|(_, v)| v.len() >= 16)
        .expect("the tests' environment holds a variable of 16 characters or more (PATH)");

    let mut accepted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut set: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut maps = BTreeSet::new();
    let mut failures = Vec::new();
    for (n, text) in configurations(&dir, &variable).iter().enumerate() {
        let config = sluice_config::parse("full.toml", text).unwrap_or_else(|e| panic!("configuration {n}: {e}"));
        let shown = config_json(&config);
        let root: toml::Table = toml::from_str(text).unwrap();
        for (at, table) in tables(&root, Vec::new()) {
            let generic = generic(&at);
            let Some(fields) = fields_accepted(&root, &at) else {
                maps.insert(generic);
                continue;
            };
            accepted.entry(generic.clone()).or_default().extend(fields);
            for key in table.keys() {
                set.entry(generic.clone()).or_default().insert(key.clone());
                let mut field = at.clone();
                field.push((key.clone(), None));
                if !shows(&shown, &field) {
                    failures.push(format!(
                        "configuration {n} sets `{}` but /config does not show it (observe/config_view.rs)",
                        written(&field)
                    ));
                }
            }
        }
    }
    for (table, fields) in &accepted {
        let given = set.get(table).cloned().unwrap_or_default();
        for field in fields.difference(&given) {
            let field = if table.is_empty() { field.clone() } else { format!("{table}.{field}") };
            failures.push(format!(
                "the file accepts `{field}` but no configuration of this test sets it: set it in \
                 `configurations` and show it in /config"
            ));
        }
    }
    assert_eq!(maps, MAPS.iter().map(|m| m.to_string()).collect(), "tables read as maps rather than fields");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every table of `table` (itself included) with its path: tables, arrays of tables, inline
/// tables.
fn tables(table: &toml::Table, at: Vec<Step>) -> Vec<(Vec<Step>, &toml::Table)> {
    let mut found = vec![(at.clone(), table)];
    for (key, value) in table {
        match value {
            toml::Value::Table(t) => {
                let mut below = at.clone();
                below.push((key.clone(), None));
                found.extend(tables(t, below));
            }
            toml::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let toml::Value::Table(t) = item {
                        let mut below = at.clone();
                        below.push((key.clone(), Some(i)));
                        found.extend(tables(t, below));
                    }
                }
            }
            _ => {}
        }
    }
    found
}

/// The fields the parser accepts in the table at `at` of `root`, from its answer to an unknown
/// key there; `None` when the table takes any key (a map).
fn fields_accepted(root: &toml::Table, at: &[Step]) -> Option<Vec<String>> {
    let mut probed = root.clone();
    let mut table = &mut probed;
    for (key, index) in at {
        let value = table.get_mut(key).unwrap();
        let value = match index {
            Some(i) => &mut value.as_array_mut().unwrap()[*i],
            None => value,
        };
        table = value.as_table_mut().unwrap();
    }
    table.insert(PROBE.into(), toml::Value::Integer(1));
    let text = toml::to_string(&probed).unwrap();
    let e = sluice_config::parse("probe.toml", &text).expect_err("an unknown key is refused").to_string();
    let (_, expected) = e.split_once(&format!("unknown field `{PROBE}`, expected "))?;
    Some(expected.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

/// A path without its indices: `route.limits`.
fn generic(at: &[Step]) -> String {
    at.iter().map(|(key, _)| key.as_str()).collect::<Vec<_>>().join(".")
}

/// A path as errors write it: `route[0].limits[1].cost`.
fn written(at: &[Step]) -> String {
    let steps: Vec<String> = at
        .iter()
        .map(|(key, index)| match index {
            Some(i) => format!("{key}[{i}]"),
            None => key.clone(),
        })
        .collect();
    steps.join(".")
}

/// True when `/config` (`shown`) holds a value other than `null` where the field at `field`
/// shows.
fn shows(shown: &Value, field: &[Step]) -> bool {
    let indices: Vec<usize> = field.iter().filter_map(|(_, i)| *i).collect();
    let generic = generic(field);
    let place = match SHOWN_AS.iter().find(|(from, _)| *from == generic) {
        Some((_, to)) => to.to_string(),
        None => {
            let mut steps: Vec<String> =
                field.iter().map(|(key, i)| if i.is_some() { format!("{key}[]") } else { key.clone() }).collect();
            for (file, view) in [("policy", "policies"), ("route", "routes")] {
                if let Some(rest) = steps[0].strip_prefix(file).filter(|rest| rest.is_empty() || *rest == "[]") {
                    steps[0] = format!("{view}{rest}");
                }
            }
            steps.join(".")
        }
    };
    let steps: Vec<&str> = place.split('.').collect();
    let in_ms = format!("{place}_ms");
    found(shown, &steps, &indices) || found(shown, &in_ms.split('.').collect::<Vec<_>>(), &indices)
}

/// True when `steps` (`name` or `name[]`, taking `indices` in turn) lead from `v` to a value
/// other than `null`.
fn found(v: &Value, steps: &[&str], indices: &[usize]) -> bool {
    let Some((step, rest)) = steps.split_first() else { return !v.is_null() };
    match step.strip_suffix("[]") {
        None => v.get(step).is_some_and(|below| found(below, rest, indices)),
        Some(name) => {
            let Some(items) = v.get(name).and_then(Value::as_array) else { return false };
            match indices.split_first() {
                Some((i, later)) => items.get(*i).is_some_and(|item| found(item, rest, later)),
                None => items.iter().any(|item| found(item, rest, &[])),
            }
        }
    }
}
