//! `deploy/systemd/sluice.service`: `systemd-analyze verify` accepts it (its programs exist, its
//! manual page resolves, no directive is unknown), its sandbox scores as exposed as little as
//! `systemd-analyze security --offline` allows, and its commands are the binary's real ones:
//! `ExecStartPre` checks the configuration, `ExecStart` serves it, `ExecReload` (SIGHUP to the
//! main process) reloads it, and the stop signal drains and exits cleanly.
//!
//! systemd need not run here: `verify` and `security --offline` read files only. The unit's
//! binary path is replaced by the binary under test; nothing else is changed.

mod ops_support;
mod support;

use std::collections::BTreeMap;

#[cfg(feature = "external-programs")]
use ops_support::require;
use ops_support::{Running, SLUICE, get, root, run};
use support::TempDir;

#[cfg(feature = "external-programs")]
const INSTALL: &str = "apt-get install systemd (it provides systemd-analyze)";
/// Where the unit runs the binary from: where the Debian package installs it.
const INSTALLED_PATH: &str = "/usr/bin/sluice";

fn unit_text() -> String {
    std::fs::read_to_string(root().join("deploy/systemd/sluice.service")).expect("the unit file")
}

/// The unit's `key=value` settings (every value of a repeated key).
fn settings(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.starts_with('[')) {
        if let Some((k, v)) = line.split_once('=') {
            out.entry(k.to_owned()).or_default().push(v.to_owned());
        }
    }
    out
}

/// The unit as it would be installed, pointing at the binary under test, with sluice's manual
/// pages (`sluice man --dir`) where `man` finds them.
#[cfg(feature = "external-programs")]
fn installed(dir: &TempDir) -> (String, String) {
    let unit = dir.write("sluice.service", &unit_text().replace(INSTALLED_PATH, SLUICE));
    let man = dir.path("man");
    let (ok, _, err) = run(SLUICE, &["man", "--dir", &format!("{man}/man1")]);
    assert!(ok, "sluice man --dir failed: {err}");
    (unit, man)
}

#[cfg(feature = "external-programs")]
#[test]
fn systemd_analyze_verifies_the_unit_and_rates_its_sandbox() {
    require("systemd-analyze", "--version", INSTALL);
    let dir = TempDir::new("systemd");
    let (unit, man) = installed(&dir);
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", &unit])
        .env("MANPATH", &man)
        .output()
        .expect("systemd-analyze runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{err}");
    assert!(!err.contains("sluice.service"), "systemd-analyze verify warned:\n{err}");

    let (_, report, err) = run("systemd-analyze", &["security", "--offline=yes", &unit]);
    let level = report
        .lines()
        .chain(err.lines())
        .find_map(|l| l.split("Overall exposure level for sluice.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}{err}"));
    // 0 is a unit that can do nothing, 10 one that can do anything; "OK" ends at 3.9.
    assert!(level <= 2.0, "exposure level {level}:\n{report}");
}

#[test]
fn the_unit_keeps_the_sandbox_it_promises() {
    let s = settings(&unit_text());
    let one = |k: &str| s.get(k).map(|v| v.join(" ")).unwrap_or_default();
    assert_eq!(one("DynamicUser"), "yes");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("ProtectHome"), "yes");
    assert_eq!(one("PrivateTmp"), "yes");
    // One capability, the one that binds ports below 1024; no other survives.
    assert_eq!(one("CapabilityBoundingSet"), "CAP_NET_BIND_SERVICE");
    assert_eq!(one("AmbientCapabilities"), "CAP_NET_BIND_SERVICE");
    assert_eq!(one("ExecReload"), "kill -HUP $MAINPID");
    assert_eq!(one("KillSignal"), "SIGTERM");
    // The package's system user when it exists (deploy/deb/sluice.sysusers), else a dynamic one
    // of that name: either way no user the host already has for something else.
    assert_eq!(one("User"), "sluice");
    assert_eq!(one("Group"), "sluice");
    // ProtectSystem=strict leaves the file system read-only but for the state directory, where
    // the book puts the memory store's snapshot (docs/src/storage.md).
    assert_eq!(one("StateDirectory"), "sluice");
    let storage = std::fs::read_to_string(root().join("docs/src/storage.md")).unwrap();
    let snapshot = storage.lines().find_map(|l| l.trim().strip_prefix("snapshot = \"")).expect("the book's snapshot");
    assert!(snapshot.starts_with("/var/lib/sluice/"), "{snapshot} is not in the unit's StateDirectory");
    assert!(!s.contains_key("PrivateUsers"), "a user namespace would void CAP_NET_BIND_SERVICE");
}

#[test]
fn the_units_commands_check_serve_reload_and_stop_the_gateway() {
    let dir = TempDir::new("systemd-commands");
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[admin]
listen = "{admin}"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 1

[[route]]
name = "hello"
path = "/api/hello"
limits = [{{ policy = "per-ip", key = "ip" }}]
"#
    );
    let path = dir.write("sluice.toml", &config);
    let s = settings(&unit_text());
    // The unit's own command lines, with the installed paths replaced.
    let command = |key: &str| -> Vec<String> {
        let line = s[key][0].replace(INSTALLED_PATH, SLUICE).replace("/etc/sluice/sluice.toml", &path);
        line.split_whitespace().map(str::to_owned).collect()
    };

    let pre = command("ExecStartPre");
    let (ok, out, err) = run(&pre[0], &pre[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "ExecStartPre failed: {out}{err}");
    assert!(out.contains("hello"), "{out}");

    let start = command("ExecStart");
    let args: Vec<&str> = start[1..].iter().map(String::as_str).collect();
    let mut sluice = Running::start(&args, &[]);
    let (_, admin_at) = sluice.gateway_addresses();
    assert_eq!(get(admin_at.expect("admin listener"), "/readyz").status, 200);

    // ExecReload: `kill -HUP $MAINPID`, MAINPID being the process ExecStart started.
    std::fs::write(&path, config.replace("name = \"hello\"", "name = \"greeting\"")).unwrap();
    let reload = s["ExecReload"][0].replace("$MAINPID", &sluice.child.id().to_string());
    let words: Vec<&str> = reload.split_whitespace().collect();
    let (ok, _, err) = run(words[0], &words[1..]);
    assert!(ok, "ExecReload failed: {err}");
    let line = sluice.line_with("\"event\":\"reload\"");
    assert!(line.contains("\"result\":\"ok\""), "{line}");
    let routes = get(admin_at.unwrap(), "/config").body;
    assert!(routes.contains("\"greeting\""), "{routes}");

    // KillSignal: SIGTERM drains and exits 0 well within TimeoutStopSec.
    let (ok, _, err) = run("kill", &["-TERM", &sluice.child.id().to_string()]);
    assert!(ok, "{err}");
    sluice.line_with("\"event\":\"stop\"");
    let status = sluice.child.wait().expect("sluice exits");
    assert!(status.success(), "{status}");
}
