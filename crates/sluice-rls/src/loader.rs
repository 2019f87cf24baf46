//! envoyproxy/ratelimit's YAML files into [`Descriptors`]: every key of its format, sluice's
//! `algorithm`, `burst`, `unit_multiplier` and `window` on top; every error located.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use sluice_config::MAX_SLIDING_LOG_LIMIT;
use sluice_core::{AlgorithmKind, NANOS_PER_SEC, Nanos, parse_duration};

use crate::descriptors::{Descriptor, Descriptors, Domain, Level, Limit, Wildcard};
use crate::error::RlsConfigError;
use crate::rate_limit::{RateLimit, Rule, Unit, policy};
use crate::yaml::{self, Kind, Node};

/// Loads every `*.yaml` and `*.yml` file of `dir` (not its subdirectories, nor hidden files),
/// in name order, one domain per file.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("sluice-rls-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n").unwrap();
/// let d = sluice_rls::load_dir(&dir).unwrap();
/// assert_eq!(d.domain_names(), ["a"]);
/// std::fs::write(dir.join("b.yml"), "domain: a\n").unwrap();
/// let e = sluice_rls::load_dir(&dir).unwrap_err();
/// assert!(e.to_string().ends_with("b.yml:1: domain: duplicate domain `a` (also in a.yaml)"), "{e}");
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn load_dir(dir: &Path) -> Result<Descriptors, RlsConfigError> {
    load_dir_stamped(dir).map(|(descriptors, _)| descriptors)
}

/// [`load_dir`], and the [`DirStamp`] of the very bytes it parsed: what the watcher compares
/// the directory with, so that a file rewritten while it was read is read again.
pub(crate) fn load_dir_stamped(dir: &Path) -> Result<(Descriptors, DirStamp), RlsConfigError> {
    let unreadable = |file: String, e: std::io::Error| RlsConfigError {
        file,
        line: None,
        field: "(file)".into(),
        message: format!("cannot read: {e}"),
    };
    let files = descriptor_files(dir).map_err(|e| unreadable(dir.display().to_string(), e))?;
    let mut out = Descriptors::default();
    let mut stamp = Vec::with_capacity(files.len());
    for path in files {
        let file = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|e| unreadable(file.clone(), e))?;
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            unreadable(
                file.clone(),
                std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"),
            )
        })?;
        add_file(&mut out, &file, text)?;
        stamp.push((path, Some(bytes)));
    }
    Ok((out, Ok(stamp)))
}

/// The descriptor files of `dir`, sorted: `*.yaml` and `*.yml`, not hidden, regular files or
/// links to them (a Kubernetes ConfigMap mounts its files as links).
fn descriptor_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The directory's descriptor files as they are now: each file's path and bytes, or why the
/// directory could not be listed. Two equal stamps mean nothing worth reloading changed; the
/// watcher compares them. Contents rather than modification times, so that a rewrite within
/// the clock's granularity is seen too (descriptor files are small).
pub(crate) type DirStamp = Result<Vec<(std::path::PathBuf, Option<Vec<u8>>)>, String>;

/// The [`DirStamp`] of `dir` now.
pub(crate) fn dir_stamp(dir: &Path) -> DirStamp {
    let files = descriptor_files(dir).map_err(|e| e.to_string())?;
    Ok(files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).ok();
            (path, bytes)
        })
        .collect())
}

/// Parses one file's text (`file` names it in errors) into a set of one domain.
///
/// ```
/// let e = sluice_rls::parse_file("x.yaml", "domain: x\ndescriptors:\n  - key: k\n    rate_limt: {}\n").unwrap_err();
/// assert_eq!(e.to_string(), "x.yaml:4: descriptors[0].rate_limt: unknown key (key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, metadata, stream_done)");
/// ```
pub fn parse_file(file: &str, text: &str) -> Result<Descriptors, RlsConfigError> {
    let mut out = Descriptors::default();
    add_file(&mut out, file, text)?;
    Ok(out)
}

fn add_file(out: &mut Descriptors, file: &str, text: &str) -> Result<(), RlsConfigError> {
    let f = File { name: file };
    let root = yaml::parse(text).map_err(|e| f.error(e.line, "(syntax)", e.message))?;
    let Some(root) = root.filter(|r| !r.is_null()) else {
        return Err(f.error(Some(1), "domain", "the file has no `domain`".to_string()));
    };
    let entries = f.map(&root, "(root)")?;
    let (mut domain, mut descriptors) = (None, None);
    for (k, v) in entries {
        match f.key(k, "(root)")? {
            "domain" => domain = Some((f.string(v, "domain")?, k.line)),
            "descriptors" => descriptors = Some(v),
            _ => return Err(f.error(Some(k.line), f.key(k, "")?, "unknown key (domain, descriptors)".into())),
        }
    }
    let (name, line) = domain.unwrap_or_default();
    if name.is_empty() {
        return Err(f.error(Some(line.max(root.line)), "domain", "must not be empty".into()));
    }
    if let Some(other) = out.domains.get(&name) {
        let other = Path::new(&other.file).file_name().map_or(other.file.clone(), |n| n.to_string_lossy().into_owned());
        return Err(f.error(Some(line), "domain", format!("duplicate domain `{name}` (also in {other})")));
    }
    let mut level = Level::default();
    if let Some(list) = descriptors {
        let mut ctx = Ctx { file: &f, domain: &name, limits: &mut out.limits };
        ctx.level(&mut level, list, "descriptors", "")?;
    }
    out.domains.insert(name, Domain { file: file.to_string(), root: level });
    Ok(())
}

/// The file being read, for errors.
struct File<'a> {
    /// Its name.
    name: &'a str,
}

impl File<'_> {
    fn error(&self, line: Option<usize>, field: impl Into<String>, message: String) -> RlsConfigError {
        RlsConfigError { file: self.name.to_string(), line, field: field.into(), message }
    }

    fn map<'n>(&self, n: &'n Node, field: &str) -> Result<&'n [(Node, Node)], RlsConfigError> {
        match &n.kind {
            Kind::Map(entries) => Ok(entries),
            _ => Err(self.error(Some(n.line), field, "must be a mapping".into())),
        }
    }

    fn key<'n>(&self, n: &'n Node, field: &str) -> Result<&'n str, RlsConfigError> {
        match &n.kind {
            Kind::Scalar(s, _) => Ok(s),
            _ => Err(self.error(Some(n.line), field, "keys must be strings".into())),
        }
    }

    /// A string field: any scalar's text (`value: 123` is "123"); null is empty.
    fn string(&self, n: &Node, field: &str) -> Result<String, RlsConfigError> {
        match &n.kind {
            _ if n.is_null() => Ok(String::new()),
            Kind::Scalar(s, _) => Ok(s.clone()),
            _ => Err(self.error(Some(n.line), field, "must be a string".into())),
        }
    }

    fn bool(&self, n: &Node, field: &str) -> Result<bool, RlsConfigError> {
        if let Kind::Scalar(s, false) = &n.kind {
            match s.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Ok(true),
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Ok(false),
                _ => {}
            }
        }
        Err(self.error(Some(n.line), field, "must be true or false".into()))
    }

    fn uint(&self, n: &Node, field: &str, max: u64) -> Result<u64, RlsConfigError> {
        if let Kind::Scalar(s, false) = &n.kind
            && let Ok(v) = s.replace('_', "").parse::<u64>()
            && v <= max
        {
            return Ok(v);
        }
        Err(self.error(Some(n.line), field, format!("must be a whole number from 0 to {max}")))
    }

    fn seq<'n>(&self, n: &'n Node, field: &str) -> Result<&'n [Node], RlsConfigError> {
        match &n.kind {
            _ if n.is_null() => Ok(&[]),
            Kind::Seq(items) => Ok(items),
            _ => Err(self.error(Some(n.line), field, "must be a list".into())),
        }
    }
}

/// Where descriptors are being loaded into.
struct Ctx<'a> {
    /// The file, for errors.
    file: &'a File<'a>,
    /// The domain being loaded.
    domain: &'a str,
    /// Every limit so far.
    limits: &'a mut Vec<Limit>,
}

const DESCRIPTOR_KEYS: &str = "key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric, \
                               share_threshold, quota_mode, metadata, stream_done";
const RATE_LIMIT_KEYS: &str =
    "unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, unit_multiplier, window";

impl Ctx<'_> {
    /// Loads the descriptor list `list` (at `field`) into `level`; `parent` is the configured
    /// path of the level (`key_value.key.`).
    fn level(&mut self, level: &mut Level, list: &Node, field: &str, parent: &str) -> Result<(), RlsConfigError> {
        let f = self.file;
        for (i, item) in f.seq(list, field)?.iter().enumerate() {
            let at = format!("{field}[{i}]");
            let entries = f.map(item, &at)?;
            let mut d = Descriptor::default();
            let (mut key, mut value, mut rate, mut nested) = (None, String::new(), None, None);
            let (mut shadow, mut detailed, mut stream_done) = (false, false, false);
            for (k, v) in entries {
                let name = f.key(k, &at)?;
                let here = format!("{at}.{name}");
                match name {
                    "key" => key = Some(f.string(v, &here)?),
                    "value" => value = f.string(v, &here)?,
                    "rate_limit" => rate = Some(v),
                    "descriptors" => nested = Some(v),
                    "shadow_mode" => shadow = f.bool(v, &here)?,
                    "detailed_metric" => detailed = f.bool(v, &here)?,
                    "stream_done" => stream_done = f.bool(v, &here)?,
                    "value_to_metric" => d.value_to_metric = f.bool(v, &here)?,
                    "share_threshold" => d.share_threshold = f.bool(v, &here)?,
                    "quota_mode" => {
                        if f.bool(v, &here)? {
                            let msg = "is not supported by sluice (a quota-mode descriptor denies only when every \
                                       quota descriptor of the request does, which sluice's all-or-nothing \
                                       charging cannot express); remove it or set it to false";
                            return Err(f.error(Some(v.line), here, msg.into()));
                        }
                    }
                    // Arbitrary response metadata in envoyproxy/ratelimit: accepted, not sent.
                    "metadata" => {}
                    _ => return Err(f.error(Some(k.line), here, format!("unknown key ({DESCRIPTOR_KEYS})"))),
                }
            }
            let key = key.unwrap_or_default();
            if key.is_empty() {
                return Err(f.error(Some(item.line), format!("{at}.key"), "every descriptor needs a key".into()));
            }
            let composite = if value.is_empty() { key.clone() } else { format!("{key}_{value}") };
            let path = format!("{parent}{composite}");
            if level.children.contains_key(&composite) {
                let msg = format!("duplicate descriptor `{path}` (the same key and value twice in one list)");
                return Err(f.error(Some(item.line), format!("{at}.key"), msg));
            }
            if d.share_threshold && !composite.contains('*') {
                let msg = format!("share_threshold needs a value with `*`, and `{composite}` has none");
                return Err(f.error(Some(item.line), format!("{at}.share_threshold"), msg));
            }
            if let Some(r) = rate {
                let rate = self.rate_limit(r, &format!("{at}.rate_limit"))?;
                d.limit = Some(self.limits.len());
                let domain = self.domain.to_string();
                let limit = Limit { rate, shadow, detailed_metric: detailed, stream_done, domain, path: path.clone() };
                self.limits.push(limit);
            }
            if let Some(n) = nested {
                self.level(&mut d.next, n, &format!("{at}.descriptors"), &format!("{path}."))?;
            }
            if composite.contains('*') {
                level.wildcards.push(Wildcard {
                    composite: composite.clone(),
                    parts: composite.split('*').map(String::from).collect(),
                });
            }
            d.value = value;
            level.children.insert(composite, d);
        }
        Ok(())
    }

    fn rate_limit(&mut self, node: &Node, field: &str) -> Result<RateLimit, RlsConfigError> {
        let f = self.file;
        let mut fields: HashMap<&str, &Node> = HashMap::new();
        for (k, v) in f.map(node, field)? {
            let name = f.key(k, field)?;
            if !RATE_LIMIT_KEYS.split(", ").any(|known| known == name) {
                return Err(f.error(
                    Some(k.line),
                    format!("{field}.{name}"),
                    format!("unknown key ({RATE_LIMIT_KEYS})"),
                ));
            }
            fields.insert(name, v);
        }
        let at = |name: &str| format!("{field}.{name}");
        let line = |name: &str| Some(fields.get(name).map_or(node.line, |n| n.line));
        let err = |name: &str, msg: String| f.error(line(name), at(name), msg);
        let text = |name: &str| fields.get(name).map(|n| f.string(n, &at(name))).transpose();
        let unlimited = fields.get("unlimited").map(|n| f.bool(n, &at("unlimited"))).transpose()?.unwrap_or(false);
        let name = text("name")?.unwrap_or_default();
        let mut replaces = Vec::new();
        if let Some(list) = fields.get("replaces") {
            for (i, item) in f.seq(list, &at("replaces"))?.iter().enumerate() {
                let here = format!("{field}.replaces[{i}]");
                let mut replaced = String::new();
                for (k, v) in f.map(item, &here)? {
                    match f.key(k, &here)? {
                        "name" => replaced = f.string(v, &format!("{here}.name"))?,
                        other => {
                            return Err(f.error(Some(k.line), format!("{here}.{other}"), "unknown key (name)".into()));
                        }
                    }
                }
                if replaced.is_empty() {
                    return Err(f.error(Some(item.line), format!("{here}.name"), "must not be empty".into()));
                }
                if replaced == name {
                    let msg = format!("a limit cannot replace itself (`{name}`)");
                    return Err(f.error(Some(item.line), format!("{here}.name"), msg));
                }
                replaces.push(replaced);
            }
        }
        let unit_text = text("unit")?.unwrap_or_default();
        let unit = match unit_text.as_str() {
            "" => None,
            u => match Unit::parse(u) {
                Some(unit) => Some(unit),
                None => {
                    let msg = format!("`{u}` is not a unit (second, minute, hour, day, week, month, year)");
                    return Err(err("unit", msg));
                }
            },
        };
        if unlimited {
            if let Some(extra) = ["unit", "requests_per_unit", "algorithm", "burst", "unit_multiplier", "window"]
                .into_iter()
                .find(|k| fields.contains_key(k))
            {
                return Err(err(extra, "an unlimited limit takes no unit, rate or algorithm".into()));
            }
            return Ok(RateLimit {
                requests_per_unit: 0,
                unit: Unit::Second,
                period: 0,
                rule: Rule::Unlimited,
                name,
                replaces,
            });
        }
        let requests = match fields.get("requests_per_unit") {
            Some(n) => f.uint(n, &at("requests_per_unit"), u64::from(u32::MAX))?,
            None => 0,
        };
        let multiplier = fields
            .get("unit_multiplier")
            .map(|n| f.uint(n, &at("unit_multiplier"), u64::from(u32::MAX)))
            .transpose()?;
        let (unit, period) = match (unit, text("window")?) {
            (Some(_), Some(_)) => return Err(err("window", "give `unit` or `window`, not both".into())),
            (None, None) => {
                return Err(err("unit", "is required (second, minute, hour, day, week, month, year)".into()));
            }
            (None, Some(w)) => {
                if multiplier.is_some() {
                    return Err(err("unit_multiplier", "applies to `unit`, not to `window`".into()));
                }
                let period: Nanos = parse_duration(&w).map_err(|e| err("window", e.to_string()))?;
                if period == 0 {
                    return Err(err("window", "must be longer than 0".into()));
                }
                (Unit::within(period), period)
            }
            (Some(unit), None) => {
                let m = multiplier.unwrap_or(1);
                if m == 0 {
                    return Err(err("unit_multiplier", "must be at least 1".into()));
                }
                let period = unit.seconds().checked_mul(m).and_then(|s| s.checked_mul(NANOS_PER_SEC));
                (unit, period.ok_or_else(|| err("unit_multiplier", "the period is too long".into()))?)
            }
        };
        let algorithm = match text("algorithm")? {
            None => AlgorithmKind::FixedWindow,
            Some(a) => AlgorithmKind::parse(&a).ok_or_else(|| {
                err("algorithm", format!("`{a}` is not one of {}", sluice_core::ALGORITHM_NAMES.join(", ")))
            })?,
        };
        let burst = fields.get("burst").map(|n| f.uint(n, &at("burst"), u64::MAX)).transpose()?;
        if burst.is_some() && !matches!(algorithm, AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket) {
            return Err(err("burst", "applies to token-bucket and leaky-bucket only".into()));
        }
        if algorithm == AlgorithmKind::SlidingLog && requests > MAX_SLIDING_LOG_LIMIT {
            let msg = format!("a sliding-log limit keeps one timestamp per request: at most {MAX_SLIDING_LOG_LIMIT}");
            return Err(err("requests_per_unit", msg));
        }
        let rule = if requests == 0 {
            Rule::Zero
        } else {
            let p = policy(algorithm, requests, period, burst)
                .map_err(|e| f.error(Some(node.line), field, e.to_string()))?;
            Rule::Policy(p)
        };
        let requests_per_unit = u32::try_from(requests).unwrap_or(u32::MAX);
        Ok(RateLimit { requests_per_unit, unit, period, rule, name, replaces })
    }
}

/// Names of limits that a `replaces` refers to but no limit of the set carries (a likely typo;
/// not an error, as in envoyproxy/ratelimit).
pub fn dangling_replaces(d: &Descriptors) -> Vec<String> {
    let names: HashSet<&str> = d.limits.iter().map(|l| l.rate.name.as_str()).filter(|n| !n.is_empty()).collect();
    let mut out: Vec<String> =
        d.limits.iter().flat_map(|l| &l.rate.replaces).filter(|r| !names.contains(r.as_str())).cloned().collect();
    out.sort();
    out.dedup();
    out
}
