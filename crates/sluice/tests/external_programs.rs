//! A plain `cargo test` needs no program installed: every test that starts a program from outside
//! the workspace is compiled only with its crate's `external-programs` feature — its file is a
//! `[[test]]` with `required-features` in the crate's Cargo.toml, or the test itself carries
//! `#[cfg(feature = "external-programs")]`. Read from the sources, so that a new test starting
//! Redis without the gate fails here on a machine that has Redis too (CI installs everything).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The programs `scripts/test` installs for the gated tests.
const PROGRAMS: [&str; 12] = [
    "redis-server",
    "redis-cli",
    "envoy",
    "caddy",
    "nginx",
    "traefik",
    "chromium",
    "promtool",
    "systemd-analyze",
    "man",
    "bash",
    "python3",
];
/// What the tests' support modules start those programs through.
const SPAWNERS: [&str; 4] = ["RedisServer::start", "RedisCluster::start", "Backend::Redis", "App::start"];
const GATE: &str = "#[cfg(feature = \"external-programs\")]";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crates() -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .expect("the crates directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    all.sort();
    all
}

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for path in entries.map(|e| e.expect("a directory entry").path()) {
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A path as the workspace names it, for the messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(workspace()).unwrap_or(path).display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `[[test]]` targets of a Cargo.toml that require the `external-programs` feature.
fn gated_files(manifest: &str) -> BTreeSet<String> {
    let mut gated = BTreeSet::new();
    for target in manifest.split("[[test]]").skip(1) {
        let table = target.split("\n[").next().unwrap_or_default();
        let name = table.lines().find_map(|l| l.trim().strip_prefix("name = \"")?.strip_suffix('"'));
        let required = table.lines().any(|l| l.starts_with("required-features") && l.contains("\"external-programs\""));
        if let (Some(name), true) = (name, required) {
            gated.insert(name.to_owned());
        }
    }
    gated
}

/// A function at the top level of a file: its attribute and doc lines, name and text.
struct Item {
    attrs: Vec<String>,
    name: String,
    body: String,
}

fn items(text: &str) -> Vec<Item> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("async fn ").or_else(|| line.strip_prefix("fn ")) else { continue };
        let name = rest.split(['(', '<']).next().unwrap_or_default().to_owned();
        let attrs =
            lines[..i].iter().rev().take_while(|l| l.starts_with("#[") || l.starts_with("///")).map(|l| l.to_string());
        let end = lines[i..].iter().position(|l| *l == "}").map_or(lines.len(), |n| i + n + 1);
        out.push(Item { attrs: attrs.collect(), name, body: lines[i..end].join("\n") });
    }
    out
}

fn is_test(item: &Item) -> bool {
    item.attrs.iter().any(|a| a.starts_with("#[test]") || a.starts_with("#[tokio::test"))
}

/// What in a test's text means it starts a program: the program run by name, a support
/// module's spawner, or a function of the same file that does either.
fn markers(items: &[Item]) -> Vec<String> {
    let mut markers: Vec<String> = PROGRAMS
        .iter()
        .flat_map(|p| [format!("Command::new(\"{p}\""), format!("require(\"{p}\""), format!("run(\"{p}\"")])
        .chain(SPAWNERS.iter().map(|s| s.to_string()))
        .collect();
    loop {
        let more: Vec<String> = items
            .iter()
            .filter(|i| !is_test(i) && markers.iter().any(|m| i.body.contains(m.as_str())))
            .map(|i| format!("{}(", i.name))
            .filter(|m| !markers.contains(m))
            .collect();
        if more.is_empty() {
            return markers;
        }
        markers.extend(more);
    }
}

#[test]
fn every_test_that_starts_a_program_is_behind_the_feature() {
    let mut ungated = Vec::new();
    let (mut files, mut tests) = (0, 0);
    for krate in crates() {
        let gated = gated_files(&read(&krate.join("Cargo.toml")));
        files += gated.len();
        for file in sources(&krate.join("tests")) {
            let text = read(&file);
            let top_level = file.parent() == Some(&krate.join("tests"));
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if top_level && gated.contains(stem) {
                continue;
            }
            let items = items(&text);
            let markers = markers(&items);
            for item in items.iter().filter(|i| is_test(i) && markers.iter().any(|m| i.body.contains(m.as_str()))) {
                tests += 1;
                if !item.attrs.iter().any(|a| a == GATE) {
                    ungated.push(format!("{}: {}", shown(&file), item.name));
                }
            }
            // Tests written by a macro of a support module (`on_both_stores!`): the module they
            // are written in is gated.
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let generated = line.contains("#[tokio::test]") || line.contains("#[test]");
                if !(generated && SPAWNERS.iter().any(|s| line.contains(s))) {
                    continue;
                }
                tests += 1;
                let module = lines[..i].iter().rposition(|l| l.trim_start().starts_with("mod "));
                if !module.is_some_and(|m| m > 0 && lines[m - 1].trim() == GATE) {
                    ungated.push(format!("{}:{}: a generated test", shown(&file), i + 1));
                }
            }
        }
    }
    assert!(ungated.is_empty(), "these tests start a program but are not behind `external-programs`:\n{ungated:#?}");
    // The reading itself found what is known to be there (a parse that finds nothing passes).
    assert!(files > 10 && tests > 10, "found only {files} gated files and {tests} gated tests");
}

#[test]
fn no_unit_test_starts_a_program() {
    // Unit tests sit in modules of `src/`, where the reading above does not look: none may run
    // one of the programs at all.
    let found: Vec<String> = crates()
        .iter()
        .flat_map(|c| sources(&c.join("src")))
        .filter(|f| PROGRAMS.iter().any(|p| read(f).contains(&format!("Command::new(\"{p}\""))))
        .map(|f| shown(&f))
        .collect();
    assert!(found.is_empty(), "{found:?}");
}
