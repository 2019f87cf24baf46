//! No two modules of a crate import each other, directly or through others: the code map stays a
//! map (each module's imports point one way, so a module can be read, tested and moved with what
//! it imports and nothing that imports it). Read from the sources: a `use crate::` line in a
//! crate's top-level module (tests apart) is an edge from that module to the one it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate's top-level modules a file (of module `own`) imports with `use crate::…`, its
/// `#[cfg(test)]` part left out.
fn imports(text: &str, own: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = BTreeSet::new();
    for line in code.lines().map(str::trim_start) {
        let Some(rest) = line.strip_prefix("use crate::").or_else(|| line.strip_prefix("pub use crate::")) else {
            continue;
        };
        let names: Vec<&str> = match rest.strip_prefix('{') {
            // `use crate::{a::X, b}`: the first segment of each item.
            Some(list) => list.split(',').map(|i| i.trim().split("::").next().unwrap_or("")).collect(),
            None => vec![rest.split("::").next().unwrap_or("").trim_end_matches(';')],
        };
        for name in names {
            let name = name.trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
            if !name.is_empty() && name != own && name != "self" {
                found.insert(name.to_owned());
            }
        }
    }
    found
}

/// The module graph of the crate whose sources are in `src`: each top-level module and the
/// modules it imports.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a path").as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        edges.entry(module.clone()).or_default().extend(imports(&text, &module));
    }
    edges
}

/// A cycle through `from`, if any: the modules on it, `from` first and last.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|m| m == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if !done.insert(at.to_owned()) {
            return None;
        }
        path.push(at.to_owned());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = walk(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|m| walk(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_of_any_crate_imports_one_that_imports_it() {
    let mut circles = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(workspace().join("crates")).expect("the crates directory") {
        let dir = entry.expect("a directory entry").path();
        if !dir.join("src").is_dir() {
            continue;
        }
        crates += 1;
        if let Some(c) = cycle(&graph(&dir.join("src"))) {
            circles.push(format!("{}: {}", dir.file_name().unwrap_or_default().to_string_lossy(), c.join(" -> ")));
        }
    }
    assert!(crates >= 10, "found only {crates} crates");
    assert!(circles.is_empty(), "modules that import each other:\n{}", circles.join("\n"));
}

#[test]
fn the_check_sees_a_circle_and_the_imports_of_a_list() {
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), imports("use crate::b::X;\nuse std::fmt;\n", "a"));
    edges.insert("b".to_owned(), imports("pub use crate::{c::Y, d};\n#[cfg(test)]\nuse crate::a;", "b"));
    edges.insert("c".to_owned(), imports("use crate::a::Z;", "c"));
    assert_eq!(edges["b"], BTreeSet::from(["c".to_owned(), "d".to_owned()]), "test imports do not count");
    assert_eq!(cycle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    edges.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(cycle(&edges), None);
}
