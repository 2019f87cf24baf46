//! Secrets from the configuration, which never show themselves: not in `Debug`, not in
//! `Display`, not in `check-config` or `/config`.

use std::fmt;
#[cfg(feature = "toml")]
use std::ops::Range;

#[cfg(feature = "toml")]
use crate::error::{ConfigError, Source};

/// A secret value (a key secret, a bearer token). `Debug` and `Display` print `<redacted>`;
/// [`Secret::expose`] is the one way to the value, so every use of it is easy to find.
///
/// ```
/// use sluice_config::Secret;
/// let s = Secret::new("a long random string".into());
/// assert_eq!(format!("{s} {s:?}"), "<redacted> <redacted>");
/// assert_eq!(s.expose(), "a long random string");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// What stands in for a secret wherever one would be shown.
pub const REDACTED: &str = "<redacted>";

impl Secret {
    /// Wraps `value`.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// A URL that may carry credentials (`redis://user:password@host:6379/0`). `Debug` and
/// `Display` show it with the user information replaced by `<redacted>`; [`SecretUrl::expose`]
/// gives the URL itself.
///
/// ```
/// use sluice_config::SecretUrl;
/// let u = SecretUrl::new("redis://app:hunter2@cache:6379/0".into());
/// assert_eq!(u.to_string(), "redis://<redacted>@cache:6379/0");
/// assert_eq!(SecretUrl::new("redis://:pw@cache".into()).to_string(), "redis://<redacted>@cache");
/// assert_eq!(SecretUrl::new("redis://cache:6379".into()).to_string(), "redis://cache:6379");
/// // An `@` in the path is not user information.
/// assert_eq!(SecretUrl::new("http://h/path@x".into()).to_string(), "http://h/path@x");
/// assert!(!format!("{u:?}").contains("hunter2"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: String) -> Self {
        Self(url)
    }

    /// The URL itself, credentials included.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its user information (user and password) replaced.
    pub fn redacted(&self) -> String {
        let url = &self.0;
        let Some((scheme, rest)) = url.split_once("://") else { return url.clone() };
        // User information ends at the last `@` before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        match rest[..authority_end].rfind('@') {
            Some(at) => format!("{scheme}://{REDACTED}@{}", &rest[at + 1..]),
            None => url.clone(),
        }
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// A secret given inline as `{base}`, in a file `{base}_file` (relative to the config file's
/// folder; one trailing newline dropped), or in the environment variable `{base}_env` names: at
/// most one of the three.
#[cfg(feature = "toml")]
pub(crate) fn read_secret(
    src: &Source<'_>,
    span: &Range<usize>,
    table: &str,
    base: &str,
    (inline, file, env): (Option<String>, Option<String>, Option<String>),
) -> Result<Option<Secret>, ConfigError> {
    let field = |suffix: &str| format!("{base}{suffix}");
    let err = |f: String, msg: String| src.error(Some(src.field_line(span, &f)), format!("{table}.{f}"), msg);
    let given = [inline.is_some(), file.is_some(), env.is_some()].iter().filter(|&&g| g).count();
    if given > 1 {
        return Err(err(field(""), format!("give one of `{base}`, `{base}_file` and `{base}_env`, not several")));
    }
    let value = match (inline, file, env) {
        (Some(v), _, _) => v,
        (_, Some(path), _) => {
            let full = src.beside(&path);
            let text = std::fs::read_to_string(&full)
                .map_err(|e| err(field("_file"), format!("cannot read `{}`: {e}", full.display())))?;
            text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_string()
        }
        (_, _, Some(var)) => std::env::var(&var)
            .map_err(|_| err(field("_env"), format!("the environment variable `{var}` is not set (or not text)")))?,
        (None, None, None) => return Ok(None),
    };
    if value.len() < 16 {
        return Err(err(field(""), "must be at least 16 characters (use a long random string)".into()));
    }
    Ok(Some(Secret::new(value)))
}
