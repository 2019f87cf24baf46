//! The book's configuration reference against the code: every key the configuration model
//! accepts is documented there, and every key documented there is one the model accepts.
//!
//! The accepted keys come from the serde structs themselves (`sluice_config::accepted_keys`),
//! so a field added to the model fails this test until the reference documents it.

use std::collections::BTreeSet;

const REFERENCE: &str = include_str!("../../../docs/src/configuration-reference.md");

/// The keys the reference documents: the first cell of each table row, a dotted key in
/// backticks (`| `server.listen` | address | ... |`).
fn documented(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |"))
        .map(|(key, _)| key.to_string())
        .filter(|key| key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.'))
        .collect()
}

#[test]
fn every_accepted_key_is_documented_and_every_documented_key_is_accepted() {
    let accepted: BTreeSet<String> = sluice_config::accepted_keys().into_iter().collect();
    let rows = documented(REFERENCE);
    let documented: BTreeSet<String> = rows.iter().cloned().collect();
    let undocumented: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty(),
        "keys the configuration accepts but docs/src/configuration-reference.md does not document \
         (add a row `| `key` | type | default | meaning |` to its table): {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "keys docs/src/configuration-reference.md documents but the configuration refuses \
         (a typo, or a key that was removed): {unknown:?}"
    );
    assert_eq!(rows.len(), documented.len(), "a key is documented twice: {rows:?}");
}

#[test]
fn the_reference_rows_are_read_as_keys() {
    let page = "| key | type |\n|---|---|\n| `server.listen` | address |\n| `route.limits.key` | string |\n\
                | `RateLimit` | not a key |\n";
    assert_eq!(documented(page), ["server.listen", "route.limits.key"]);
}
