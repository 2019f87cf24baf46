//! The Debian package (`scripts/package`, cargo-deb, `[package.metadata.deb]` in this crate's
//! manifest): built around the binary under test, installed with `dpkg -i`, checked where it put
//! everything, and purged.
//!
//! A release build takes minutes and cargo-deb refuses the dev profile, so the test packages the
//! binary under test: copied to `<temporary target dir>/release/sluice`, it is what
//! `scripts/package --no-build` finds with `CARGO_TARGET_DIR` pointing there (and strips).
//!
//! It changes the machine it runs on: it needs root, installs the package, and purges it at the
//! end, also when a check fails. The `sluice` system user the package creates is kept, as a
//! purge keeps it (docs/src/services.md). It refuses to run where a `sluice` package is already
//! installed, which it would replace and then remove.

mod ops_support;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use ops_support::{SLUICE, require, root, run};
use support::TempDir;

const CARGO_DEB: &str = "cargo install cargo-deb --locked";
const DPKG: &str = "apt-get install dpkg (Debian and its derivatives have it)";
const SYSTEMD: &str = "apt-get install systemd (it provides systemd-analyze)";
/// The binary and the configuration where the package puts them.
const BINARY: &str = "/usr/bin/sluice";
const CONFIG: &str = "/etc/sluice/sluice.toml";

/// Purges the package when dropped: the machine is left as it was, whatever failed.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "sluice"]).output();
    }
}

/// Runs `program` with `args`, failing the test with its output unless it succeeds; its stdout.
#[track_caller]
fn ok(program: &str, args: &[&str]) -> String {
    let (ok, out, err) = run(program, args);
    assert!(ok, "{program} {} failed:\n{out}{err}", args.join(" "));
    out
}

/// Builds the package from the binary under test, in a temporary target directory; its path.
fn package(target: &TempDir) -> String {
    let release = target.dir().join("release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(SLUICE, release.join("sluice")).expect("copying the binary under test");
    let started = Instant::now();
    // --fast: xz at level 1, 6 s here, against 50 s for the default (xz 6) and 160 s for
    // `--compress-type gzip` (zopfli, on one core).
    let out = Command::new("bash")
        .args(["scripts/package", "--no-build", "--fast"])
        .current_dir(root())
        .env("CARGO_TARGET_DIR", target.dir())
        .output()
        .expect("bash runs scripts/package");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "scripts/package failed:\n{stdout}{stderr}");
    let deb = stdout.lines().last().unwrap_or_default().trim().to_owned();
    let size =
        std::fs::metadata(&deb).unwrap_or_else(|e| panic!("no package at {deb:?} ({e}):\n{stdout}{stderr}")).len();
    println!("packaged {deb}: {:.1} MiB in {:.1?}", size as f64 / (1 << 20) as f64, started.elapsed());
    deb
}

#[test]
fn the_package_installs_the_service_and_purges_cleanly() {
    let (_, uid, _) = run("id", &["-u"]);
    assert_eq!(uid.trim(), "0", "this test installs a Debian package with dpkg: run it as root");
    require("dpkg", "--version", DPKG);
    require("cargo-deb", "--version", CARGO_DEB);
    require("systemd-analyze", "--version", SYSTEMD);
    let (installed, status, _) = run("dpkg", &["-s", "sluice"]);
    assert!(
        !installed,
        "a sluice package is on this machine, which this test would replace and then remove: \
         `dpkg --purge sluice` first\n{status}"
    );

    let target = TempDir::new("deb");
    let deb = package(&target);
    let _purge = Installed;
    let out = ok("dpkg", &["-i", &deb]);
    // postinst says how to start the service, which it neither enabled nor started.
    assert!(out.contains("systemctl enable --now sluice"), "{out}");

    let version = ok(BINARY, &["--version"]);
    assert_eq!(version.trim(), format!("sluice {}", env!("CARGO_PKG_VERSION")));

    // The service's user: a system user and group, no login shell.
    let user = ok("getent", &["passwd", "sluice"]);
    let fields: Vec<&str> = user.trim().split(':').collect();
    let uid: u32 = fields[2].parse().expect("a uid");
    assert!(uid < 1000, "not a system user: {user}");
    assert!(fields[6].ends_with("nologin") || fields[6].ends_with("false"), "a login shell: {user}");
    ok("getent", &["group", "sluice"]);

    let files = ok("dpkg", &["-L", "sluice"]);
    let has = |path: &str| files.lines().any(|l| l == path) && Path::new(path).exists();
    let man = files.lines().filter(|l| l.starts_with("/usr/share/man/man1/sluice")).count();
    assert!(man > 1, "no man pages for sluice and its subcommands:\n{files}");
    assert!(files.lines().any(|l| l.starts_with("/usr/share/man/man1/sluice.1")), "no sluice(1):\n{files}");
    for path in [
        "/usr/share/bash-completion/completions/sluice",
        "/usr/share/zsh/vendor-completions/_sluice",
        "/usr/share/fish/vendor_completions.d/sluice.fish",
        "/usr/lib/sysusers.d/sluice.conf",
        CONFIG,
    ] {
        assert!(has(path), "{path} is not installed:\n{files}");
    }
    // The example configuration is a conffile (an upgrade keeps the operator's edits), and valid.
    let conffiles = ok("dpkg-query", &["-W", "-f=${Conffiles}", "sluice"]);
    assert!(conffiles.contains(CONFIG), "{CONFIG} is not a conffile: {conffiles}");
    let checked = ok(BINARY, &["check-config", CONFIG]);
    assert!(checked.contains("OK"), "{checked}");

    // The unit, installed where systemd looks, verified with its real binary and man page, and
    // not enabled: the service starts when its operator says so.
    let unit = files
        .lines()
        .find(|l| l.ends_with("/systemd/system/sluice.service"))
        .unwrap_or_else(|| panic!("no sluice.service:\n{files}"));
    let out = Command::new("systemd-analyze")
        .args(["verify", unit])
        .env("MANPATH", "/usr/share/man")
        .output()
        .expect("systemd-analyze runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify {unit} failed:\n{err}");
    assert!(!err.contains("sluice.service"), "systemd-analyze verify warned:\n{err}");
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/sluice.service").exists(), "enabled");

    let status = ok("dpkg", &["-s", "sluice"]);
    assert!(status.contains("Status: install ok installed"), "{status}");

    ok("dpkg", &["--purge", "sluice"]);
    for path in [BINARY, CONFIG, unit] {
        assert!(!Path::new(path).exists(), "{path} is left after dpkg --purge");
    }
    let (known, status, _) = run("dpkg", &["-s", "sluice"]);
    assert!(!known, "dpkg still knows sluice after --purge:\n{status}");
    // The user stays (its files may outlive the package), as the book says.
    ok("getent", &["passwd", "sluice"]);
}
