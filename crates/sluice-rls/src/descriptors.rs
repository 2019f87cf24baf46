//! The loaded descriptor files: one tree per domain, and the lookup envoyproxy/ratelimit does.
//!
//! Each level maps `key_value` (a descriptor with a value) and `key` (one without) to the next
//! level, as envoyproxy/ratelimit keys its maps; values with `*` are tried in file order after
//! the exact `key_value` and before the bare `key`.

use std::collections::HashMap;

use crate::rate_limit::RateLimit;

/// Every domain of a descriptor directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Descriptors {
    /// Domains by name.
    pub(crate) domains: HashMap<String, Domain>,
    /// Every limit of every domain; descriptors refer to them by index.
    pub(crate) limits: Vec<Limit>,
}

/// One domain: the file it came from and its descriptor tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    /// The file that defined it, for messages.
    pub file: String,
    /// Its top-level descriptors.
    pub(crate) root: Level,
}

/// A list of descriptors at one depth.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Level {
    /// Descriptors by `key_value` or `key`.
    pub children: HashMap<String, Descriptor>,
    /// `key_value` patterns with `*`, in file order, split at the stars.
    pub wildcards: Vec<Wildcard>,
}

/// A `key_value` pattern with `*` in its value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wildcard {
    /// The composite key it is stored under in [`Level::children`].
    pub composite: String,
    /// The composite split at each `*`.
    pub parts: Vec<String>,
}

/// One descriptor of a file.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Descriptor {
    /// Its `rate_limit`, an index into [`Descriptors::limits`].
    pub limit: Option<usize>,
    /// Its nested descriptors.
    pub next: Level,
    /// `value_to_metric`: the request's value goes into the metric label at this level.
    pub value_to_metric: bool,
    /// `share_threshold`: every value its wildcard matches shares one counter (the pattern).
    pub share_threshold: bool,
    /// `value` as written (for a shared wildcard, the part of the key that replaces a value).
    pub value: String,
}

/// A limit with what applies around it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The `rate_limit` block.
    pub rate: RateLimit,
    /// `shadow_mode`: decided and counted, never over the limit.
    pub shadow: bool,
    /// `detailed_metric`: the request's values go into the metric label.
    pub detailed_metric: bool,
    /// `stream_done` (sluice's): charged by the usage Envoy reports when a stream is done
    /// (`apply_on_stream_done`, a descriptor `hits_addend`), into debt if need be, never
    /// denying then; a request for it without its own `hits_addend` checks what is left at no
    /// cost (denied while the key owes).
    pub stream_done: bool,
    /// The domain it belongs to.
    pub domain: String,
    /// The configured path, `key_value.key` (envoyproxy/ratelimit's stat key without the domain).
    pub path: String,
}

/// What one request descriptor matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// Index of the limit in [`Descriptors::limits`].
    pub index: usize,
    /// For each entry, the value its key is counted under: the request's, or a shared
    /// wildcard's pattern (`share_threshold`).
    pub values: Vec<&'a str>,
    /// The metric label of the descriptor: the configured path, with the request's values where
    /// `detailed_metric` or `value_to_metric` ask for them.
    pub metric: String,
}

impl Descriptors {
    /// The domain called `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Names of the domains, sorted.
    pub fn domain_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Every limit, indexed as [`Matched::index`] refers to them.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The limit a request descriptor (its `(key, value)` entries) matches in `domain`:
    /// level by level, `key_value` before a wildcard before `key`; only a limit at the depth of
    /// the last entry applies.
    pub fn lookup<'a>(&'a self, domain: &str, entries: &[(&'a str, &'a str)]) -> Option<Matched<'a>> {
        let mut level = &self.domain(domain)?.root;
        let mut values: Vec<&'a str> = Vec::with_capacity(entries.len());
        let mut metric = Vec::with_capacity(entries.len());
        let mut found = None;
        for (i, &(key, value)) in entries.iter().enumerate() {
            let composite = format!("{key}_{value}");
            let (next, how) = match level.children.get(&composite) {
                Some(d) => (d, How::Value),
                None => match level.wildcards.iter().find(|w| wildcard_match(&w.parts, &composite)) {
                    Some(w) => (&level.children[&w.composite], How::Wildcard),
                    None => match level.children.get(key) {
                        Some(d) => (d, How::Key),
                        None => return None,
                    },
                },
            };
            let shared = how == How::Wildcard && next.share_threshold;
            values.push(if shared { next.value.as_str() } else { value });
            metric.push((key, value, how, next));
            if i + 1 == entries.len() {
                found = next.limit;
            }
            if next.next.children.is_empty() {
                break;
            }
            level = &next.next;
        }
        let index = found?;
        let limit = &self.limits[index];
        let metric = metric_label(&metric, limit.detailed_metric);
        values.truncate(entries.len());
        Some(Matched { limit, index, values, metric })
    }
}

/// How an entry matched its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// `key_value` exactly.
    Value,
    /// A `key_value*` pattern.
    Wildcard,
    /// `key` alone (any value).
    Key,
}

/// The metric label of a match, envoyproxy/ratelimit's stat key without the domain: each level
/// as configured (`key_value` or `key`, a wildcard as written), with the request's value where
/// the level asks for it (`value_to_metric`) or the limit does (`detailed_metric`).
fn metric_label(levels: &[(&str, &str, How, &Descriptor)], detailed: bool) -> String {
    let mut out = String::new();
    for (i, &(key, value, how, d)) in levels.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        out.push_str(key);
        let shown = match how {
            How::Wildcard if d.share_threshold => d.value.as_str(),
            _ if detailed => value,
            How::Value => value,
            How::Wildcard if d.value_to_metric => value,
            How::Wildcard => d.value.as_str(),
            How::Key if d.value_to_metric => value,
            How::Key => "",
        };
        if !shown.is_empty() {
            out.push('_');
            out.push_str(shown);
        }
    }
    out
}

/// Whether `text` matches `parts` (a pattern split at each `*`, each star matching any run of
/// characters, the empty one included).
///
/// ```
/// use sluice_rls::descriptors::wildcard_match;
/// let parts = |p: &str| p.split('*').map(String::from).collect::<Vec<_>>();
/// assert!(wildcard_match(&parts("path_/api/*/action"), "path_/api/42/action"));
/// assert!(!wildcard_match(&parts("path_/api/*/action"), "path_/api/42/other"));
/// assert!(wildcard_match(&parts("k_a*b*c"), "k_abc"));
/// assert!(!wildcard_match(&parts("k_ab*ba"), "k_aba"));
/// ```
pub fn wildcard_match(parts: &[String], text: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else { return false };
    if parts.len() == 1 {
        return first == text;
    }
    if text.len() < parts.iter().map(String::len).sum::<usize>() || !text.starts_with(first.as_str()) {
        return false;
    }
    let Some(mut rest) = text[first.len()..].strip_suffix(last.as_str()) else { return false };
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}
