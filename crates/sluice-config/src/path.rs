//! The one form of a path that routes match and keys read, so that no spelling an upstream
//! would route to a limited resource slips past its limit.
//!
//! Upstreams disagree on what a path means: Tomcat, Spring and Jetty drop `;params` from each
//! segment, some decode `%2F` to `/` or treat `\` as `/`, most resolve `.` and `..`, many match
//! case-insensitively or ignore a trailing slash. sluice matches the most inclusive reading
//! (matching more paths errs on the strict side) and refuses what it cannot read the same way
//! as every upstream: encoded separators, backslashes, control characters, and their
//! double-encoded forms.

use std::borrow::Cow;

/// Why a request path is refused (400) rather than matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    /// `%2F` or `%5C` in a segment: some upstreams read it as a separator, some do not.
    #[error("The path has an encoded `/` or `\\`.")]
    EncodedSeparator,
    /// A raw `\`, which some servers treat as `/`.
    #[error("The path has a backslash.")]
    Backslash,
    /// NUL or another control character, raw or encoded.
    #[error("The path has a control character.")]
    Control,
    /// `%25` before a hex digit or another `%` (`%252F`, `%25%32%46`): what a stack that
    /// decodes twice reads as another character — a separator, a parameter, a dot, a letter.
    #[error("The path is encoded twice.")]
    DoubleEncoded,
    /// A `%` not followed by two hex digits: not a URI (many servers refuse it; others guess).
    #[error("The path has a `%` that is not an escape.")]
    BadEscape,
}

/// The form of a route's configured path: like [`request_path`], but total (a configured
/// pattern is trusted text). Borrows when already normal.
///
/// ```
/// use sluice_config::normalize_path;
/// assert_eq!(normalize_path("/api/password-reset"), "/api/password-reset");
/// assert_eq!(normalize_path("//api/./Password-Reset/"), "/api/password-reset");
/// assert_eq!(normalize_path("/api/x/../%70assword-reset"), "/api/password-reset");
/// ```
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    request_path(path).unwrap_or_else(|_| Cow::Owned(normalize(path)))
}

/// The form of a request's path that routes are matched against and the `path` key part reads:
/// each segment's `;parameters` dropped (raw or `%3B`), percent-encoded unreserved characters
/// decoded, `.` and `..` resolved, repeated and trailing slashes dropped, ASCII lower-cased.
/// Refused: encoded separators, backslashes, control characters, double encodings.
///
/// ```
/// use sluice_config::{request_path, PathRefusal};
/// assert_eq!(request_path("/api/password-reset;jsessionid=x").unwrap(), "/api/password-reset");
/// assert_eq!(request_path("/api/password-reset%3bx=1/").unwrap(), "/api/password-reset");
/// assert_eq!(request_path("/api/x/..;/password-reset").unwrap(), "/api/password-reset");
/// assert_eq!(request_path("/api%2Fpassword-reset"), Err(PathRefusal::EncodedSeparator));
/// assert_eq!(request_path("/api\\password-reset"), Err(PathRefusal::Backslash));
/// assert_eq!(request_path("/api/password-reset%00"), Err(PathRefusal::Control));
/// assert_eq!(request_path("/api%252Fpassword-reset"), Err(PathRefusal::DoubleEncoded));
/// ```
pub fn request_path(path: &str) -> Result<Cow<'_, str>, PathRefusal> {
    // Already normal (the common case, `/api/v1/items.json`): borrowed, nothing allocated.
    let plain = path.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_~./".contains(&b))
        && !path.contains("//")
        && (path.len() <= 1 || !path.ends_with('/'))
        && path.split('/').all(|seg| seg != "." && seg != "..");
    if plain && path.starts_with('/') {
        return Ok(Cow::Borrowed(path));
    }
    check(path)?;
    Ok(Cow::Owned(normalize(path)))
}

/// What [`request_path`] refuses.
fn check(path: &str) -> Result<(), PathRefusal> {
    let bytes = path.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\\' {
            return Err(PathRefusal::Backslash);
        }
        if b.is_ascii_control() {
            return Err(PathRefusal::Control);
        }
        if b != b'%' {
            continue;
        }
        match hex_at(bytes, i + 1) {
            None => return Err(PathRefusal::BadEscape),
            Some(b'/' | b'\\') => return Err(PathRefusal::EncodedSeparator),
            Some(c) if c.is_ascii_control() => return Err(PathRefusal::Control),
            // `%25` then a hex digit or `%`: a stack that decodes twice reads another character.
            Some(b'%') if bytes.get(i + 3).is_some_and(|&n| n == b'%' || n.is_ascii_hexdigit()) => {
                return Err(PathRefusal::DoubleEncoded);
            }
            _ => {}
        }
    }
    Ok(())
}

/// The byte `%XX` at `bytes[at..at + 2]` encodes, if those are two hex digits.
fn hex_at(bytes: &[u8], at: usize) -> Option<u8> {
    let pair = bytes.get(at..at + 2)?;
    let text = std::str::from_utf8(pair).ok()?;
    u8::from_str_radix(text, 16).ok()
}

/// Segment by segment: parameters dropped, unreserved escapes decoded, lower case, dot
/// segments resolved.
fn normalize(path: &str) -> String {
    let mut segments: Vec<String> = Vec::new();
    for raw in path.split('/') {
        let seg = decode_segment(raw);
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(seg),
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// One segment up to its first `;` (raw or `%3B`), `%XX` of unreserved characters decoded,
/// ASCII lower-cased.
fn decode_segment(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b';' {
            break;
        }
        if b == b'%'
            && let Some(v) = hex_at(bytes, i + 1)
        {
            if v == b';' {
                break;
            }
            if v.is_ascii_alphanumeric() || b"-._~".contains(&v) {
                out.push(v.to_ascii_lowercase() as char);
            } else {
                // Kept encoded, in one spelling of its hex digits.
                out.push('%');
                out.push_str(&raw[i + 1..i + 3].to_ascii_lowercase());
            }
            i += 3;
            continue;
        }
        out.push(b.to_ascii_lowercase() as char);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_path_are_one_path() {
        for spelling in [
            "/api/password-reset",
            "/api/password-reset/",
            "//api//password-reset",
            "/api/./password-reset",
            "/API/Password-Reset",
            "/api/x/../password-reset",
            "/api/%70assword-reset",
            "/api/%2e/password-reset",
            "/api/x/%2e%2e/password-reset",
            "/api/password-reset;jsessionid=0123",
            "/api;v=1/password-reset",
            "/api/password-reset%3Bx",
            "/api/password-reset%3b",
            "/api/x/..;/password-reset",
            "/api/password-reset/x/..",
        ] {
            assert_eq!(request_path(spelling).unwrap(), "/api/password-reset", "{spelling}");
        }
    }

    #[test]
    fn what_upstreams_read_differently_is_refused() {
        for (path, why) in [
            ("/api%2fpassword-reset", PathRefusal::EncodedSeparator),
            ("/api%5Cpassword-reset", PathRefusal::EncodedSeparator),
            ("/api\\password-reset", PathRefusal::Backslash),
            ("/api/password-reset%00", PathRefusal::Control),
            ("/api/password-reset%0a", PathRefusal::Control),
            ("/api/password-reset%7F", PathRefusal::Control),
            ("/api/pass\tword", PathRefusal::Control),
            ("/api%252Fpassword-reset", PathRefusal::DoubleEncoded),
            ("/api/password-reset%253Bx", PathRefusal::DoubleEncoded),
            ("/api%255Cpassword-reset", PathRefusal::DoubleEncoded),
            ("/api/password-reset%2500", PathRefusal::DoubleEncoded),
        ] {
            assert_eq!(request_path(path), Err(why), "{path}");
        }
        assert_eq!(request_path("/api/x/%252e%252e/password-reset"), Err(PathRefusal::DoubleEncoded));
        assert_eq!(request_path("/api/p%25%36%31ssword-reset"), Err(PathRefusal::DoubleEncoded));
        assert_eq!(request_path("/api/%3%30"), Err(PathRefusal::BadEscape));
        assert_eq!(request_path("/api/100%"), Err(PathRefusal::BadEscape));
        // `%25` before anything else is a literal percent sign, kept encoded.
        assert_eq!(request_path("/a/100%25").unwrap(), "/a/100%25");
        assert_eq!(request_path("/a/100%25-off").unwrap(), "/a/100%25-off");
        assert_eq!(request_path("/a/%41%2a").unwrap(), "/a/a%2a");
    }

    /// Every escape decoded once.
    fn decode_once(path: &str) -> Option<String> {
        let b = path.as_bytes();
        let mut decoded = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%'
                && let Some(v) = hex_at(b, i + 1)
            {
                decoded.push(v);
                i += 3;
                continue;
            }
            decoded.push(b[i]);
            i += 1;
        }
        String::from_utf8(decoded).ok()
    }

    /// Decodes like a permissive upstream would: every escape once, `\` as `/`, params dropped.
    fn upstream_reading(path: &str) -> Option<String> {
        let mut decoded = Vec::new();
        let b = path.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%'
                && let Some(v) = hex_at(b, i + 1)
            {
                decoded.push(v);
                i += 3;
                continue;
            }
            decoded.push(b[i]);
            i += 1;
        }
        let text = String::from_utf8(decoded).ok()?.replace('\\', "/");
        let mut segs: Vec<String> = Vec::new();
        for s in text.split('/') {
            let s = s.split(';').next().unwrap_or("").to_ascii_lowercase();
            match s.as_str() {
                "" | "." => {}
                ".." => {
                    segs.pop();
                }
                _ => segs.push(s),
            }
        }
        Some(format!("/{}", segs.join("/")))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(4000)))]

        /// Differential: a spelling that a permissive upstream routes to the limited path is
        /// either matched as that path or refused, never passed unlimited.
        #[test]
        fn no_spelling_of_a_limited_path_escapes(
            parts in proptest::collection::vec(prop_oneof![
                Just("api".to_string()), Just("password-reset".to_string()), Just("x".to_string()),
                Just(".".to_string()), Just("..".to_string()), Just("".to_string()),
                Just("%2e".to_string()), Just("%2E%2e".to_string()), Just("%2f".to_string()),
                Just("%5c".to_string()), Just("\\".to_string()), Just(";a=1".to_string()),
                Just("%3b".to_string()), Just("%252f".to_string()), Just("%70".to_string()),
                Just("API".to_string()), Just("Password-Reset".to_string()), Just("%00".to_string()),
                Just("%25".to_string()), Just("%2570assword-reset".to_string()), Just("%2561pi".to_string()),
                Just("p%25%36%31ssword-reset".to_string()),
            ], 1..8),
        ) {
            let path = format!("/{}", parts.join("/"));
            // Upstreams that decode once, and the few that decode twice.
            let once = upstream_reading(&path);
            let twice = decode_once(&path).and_then(|p| upstream_reading(&p));
            // Refused is fine; matched must be matched as the limited path.
            if let Ok(ours) = request_path(&path)
                && (once.as_deref() == Some("/api/password-reset") || twice.as_deref() == Some("/api/password-reset"))
            {
                prop_assert_eq!(ours.as_ref(), "/api/password-reset", "{}", path);
            }
        }

        #[test]
        fn never_panics_and_is_idempotent(path in "/[ -~]{0,60}") {
            if let Ok(p) = request_path(&path) {
                let again = request_path(&p).map(Cow::into_owned);
                prop_assert_eq!(again.as_deref(), Ok(p.as_ref()));
            }
        }
    }
}
