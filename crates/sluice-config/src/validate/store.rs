//! `[store]`: the memory store (bounds, `when_full`, snapshot) or Redis (URLs, failure mode).

use sluice_core::NANOS_PER_MILLI;
use sluice_store::{FoldSize, MAX_FOLD_DEPTH, WhenFull};

use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;
use crate::secret::SecretUrl;

/// `[store]`; the memory store's defaults when it is absent.
pub(super) fn store(src: &Source<'_>, raw: Option<toml::Spanned<RawStore>>) -> Result<StoreConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(StoreConfig::Memory {
            max_keys: 1_000_000,
            shards: 64,
            when_full: WhenFull::default(),
            snapshot: None,
        });
    };
    let span = raw.span();
    let s = raw.into_inner();
    let err = |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("store.{field}"), msg);
    match s.kind.as_deref().unwrap_or("memory") {
        "memory" => {
            for (field, there) in [
                ("url", s.url.is_some()),
                ("urls", s.urls.is_some()),
                ("on_error", s.on_error.is_some()),
                ("key_prefix", s.key_prefix.is_some()),
                ("timeout_ms", s.timeout_ms.is_some()),
                ("sentinel", s.sentinel.is_some()),
            ] {
                if there {
                    return Err(err(field, "applies only to kind = \"redis\"".into()));
                }
            }
            let snapshot = snapshot(src, &s).map_err(|(field, msg)| err(field, msg))?;
            let max_keys = s.max_keys.unwrap_or(1_000_000);
            if max_keys == 0 {
                return Err(err("max_keys", "must be at least 1".into()));
            }
            let shards = s.shards.unwrap_or(64);
            if !shards.is_power_of_two() {
                return Err(err("shards", format!("{shards} is not a power of two")));
            }
            let when_full = when_full(&s).map_err(|(field, msg)| err(field, msg))?;
            Ok(StoreConfig::Memory { max_keys, shards, when_full, snapshot })
        }
        "redis" => {
            for (field, there) in
                [("snapshot", s.snapshot.is_some()), ("snapshot_interval", s.snapshot_interval.is_some())]
            {
                if there {
                    return Err(err(field, "applies only to kind = \"memory\" (Redis keeps its own state)".into()));
                }
            }
            let sentinel = match s.sentinel {
                Some(raw) => {
                    let servers = [("url", s.url.is_some()), ("urls", s.urls.is_some()), ("cluster", s.cluster)];
                    if let Some((field, _)) = servers.iter().find(|(_, there)| *there) {
                        return Err(src.error(
                            Some(src.line_of(raw.span().start)),
                            "store.sentinel",
                            format!("`{field}` is set too: give the Sentinels or the servers (`url`, `urls`, `cluster`), not both"),
                        ));
                    }
                    Some(sentinel(src, raw)?)
                }
                None => None,
            };
            let urls = match (s.url, s.urls) {
                (None, None) if sentinel.is_some() => Vec::new(),
                (Some(u), None) => vec![u],
                (None, Some(us)) if !us.is_empty() => us,
                (None, _) => {
                    let needs = "kind = \"redis\" needs `url` (or `urls` for a cluster, or `sentinel`)";
                    return Err(err("url", needs.into()));
                }
                (Some(_), Some(_)) => return Err(err("urls", "give `url` or `urls`, not both".into())),
            };
            let urls: Vec<SecretUrl> = urls.into_iter().map(SecretUrl::new).collect();
            if let Some(bad) =
                urls.iter().find(|u| !(u.expose().starts_with("redis://") || u.expose().starts_with("rediss://")))
            {
                return Err(err("url", format!("`{bad}` must start with redis://")));
            }
            const MODES: &str = "choose what sluice does when Redis is slow or down:\n  \
                on_error = \"fail-closed\"  answer 503 with Retry-After: nothing passes unlimited (logins, password resets)\n  \
                on_error = \"fail-open\"    admit every request: the limit is off until Redis is back (cheap reads)\n  \
                on_error = \"local\"        fall back to an in-memory limiter per instance: each instance grants the full limit";
            let on_error = match s.on_error.as_deref() {
                Some("fail-open") => OnError::FailOpen,
                Some("fail-closed") => OnError::FailClosed,
                Some("local") => OnError::Local,
                Some(other) => return Err(err("on_error", format!("`{other}` is not a failure mode; {MODES}"))),
                None => {
                    let line = src.field_line(&span, "kind");
                    return Err(src.error(
                        Some(line),
                        "store.on_error",
                        format!("is required with kind = \"redis\"; {MODES}"),
                    ));
                }
            };
            let timeout_ms = s.timeout_ms.unwrap_or(50);
            if timeout_ms == 0 {
                return Err(err("timeout_ms", "must be at least 1".into()));
            }
            let key_prefix = s.key_prefix.unwrap_or_else(|| "sluice".into());
            if !sluice_store::is_key_name(&key_prefix) {
                return Err(err("key_prefix", format!("{KEY_NAME}: `{key_prefix}` is not")));
            }
            Ok(StoreConfig::Redis { urls, cluster: s.cluster, on_error, timeout_ms, key_prefix, sentinel })
        }
        other => Err(err("kind", format!("unknown store `{other}` (memory, redis)"))),
    }
}

/// `sentinel = { master, urls }`: the name the Sentinels monitor the primary by, and their URLs,
/// whose user, password and database are the primary's (so they must all carry the same).
fn sentinel(src: &Source<'_>, raw: toml::Spanned<RawSentinel>) -> Result<Sentinel, ConfigError> {
    let span = raw.span();
    let s = raw.into_inner();
    let err = |field: &str, msg: String| {
        src.error(Some(src.field_line(&span, field)), format!("store.sentinel.{field}"), msg)
    };
    let master = match s.master {
        Some(m) if !m.is_empty() && !m.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) => m,
        Some(m) => return Err(err("master", format!("`{m}` is not a name the Sentinels can monitor a primary by"))),
        None => {
            let why = "is required: the name the Sentinels monitor the primary by (`sentinel monitor NAME ...`)";
            return Err(err("master", why.into()));
        }
    };
    let urls: Vec<SecretUrl> = match s.urls {
        Some(urls) if !urls.is_empty() => urls.into_iter().map(SecretUrl::new).collect(),
        _ => return Err(err("urls", "is required: the Sentinels' URLs, redis://host:26379".into())),
    };
    if let Some(bad) = urls.iter().find(|u| !u.expose().starts_with("redis://")) {
        return Err(err(
            "urls",
            format!("`{bad}` must start with redis:// (Sentinels are reached over TCP, without TLS)"),
        ));
    }
    // What follows the scheme, but the host and port: the user information and the database.
    let credentials = |u: &SecretUrl| {
        let rest = &u.expose()["redis://".len()..];
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        (authority.rfind('@').map(|at| authority[..at].to_string()), path.to_string())
    };
    if urls.iter().any(|u| credentials(u) != credentials(&urls[0])) {
        let why = "every Sentinel URL must carry the same user, password and database: they are the primary's";
        return Err(err("urls", why.into()));
    }
    Ok(Sentinel { master, urls })
}

/// `snapshot` and `snapshot_interval` of a memory store, or the field at fault and why.
fn snapshot(src: &Source<'_>, s: &RawStore) -> Result<Option<Snapshot>, (&'static str, String)> {
    let Some(path) = s.snapshot.as_deref() else {
        if s.snapshot_interval.is_some() {
            return Err(("snapshot_interval", "needs `snapshot`, the file to write".into()));
        }
        return Ok(None);
    };
    if path.is_empty() || path.ends_with('/') {
        return Err(("snapshot", format!("`{path}` names no file")));
    }
    let interval =
        parse_duration(s.snapshot_interval.as_deref().unwrap_or("10s")).map_err(|m| ("snapshot_interval", m))?;
    if interval < 100 * NANOS_PER_MILLI {
        return Err(("snapshot_interval", "must be at least 100ms (each write is the whole state)".into()));
    }
    Ok(Some(Snapshot { path: src.beside(path), interval }))
}

/// `when_full`, `fold_width` and `fold_depth` of a memory store, or the field at fault and why.
/// `evict-lru`, the old default, is a deprecated spelling of `fold`: it evicts without loosening.
fn when_full(s: &RawStore) -> Result<WhenFull, (&'static str, String)> {
    let other_than_fold = match s.when_full.as_deref().unwrap_or("fold") {
        "fold" | "evict-lru" => None,
        "refuse" => Some(WhenFull::Refuse),
        "forget" => Some(WhenFull::Forget),
        other => return Err(("when_full", format!("`{other}` is not fold, refuse or forget"))),
    };
    if let Some(when_full) = other_than_fold {
        for (field, there) in [("fold_width", s.fold_width.is_some()), ("fold_depth", s.fold_depth.is_some())] {
            if there {
                return Err((field, "applies only to when_full = \"fold\"".into()));
            }
        }
        return Ok(when_full);
    }
    let mut size = FoldSize::default();
    if let Some(width) = s.fold_width {
        if width == 0 {
            return Err(("fold_width", "must be at least 1".into()));
        }
        size.width = Some(width);
    }
    if let Some(depth) = s.fold_depth {
        if !(1..=MAX_FOLD_DEPTH).contains(&depth) {
            return Err(("fold_depth", format!("{depth} is not between 1 and {MAX_FOLD_DEPTH}")));
        }
        size.depth = depth;
    }
    Ok(WhenFull::Fold(size))
}

/// What a name that goes into Redis keys may hold ([`sluice_store::is_key_name`]).
pub(super) const KEY_NAME: &str = "goes into every Redis key verbatim: 1 to 128 ASCII letters, digits and -_./";
