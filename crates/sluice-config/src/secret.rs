//! Secrets from the configuration, which never show themselves: not in `Debug`, not in
//! `Display`, not in `check-config` or `/config`.

use std::fmt;

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
