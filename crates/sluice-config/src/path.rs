//! The one form of a path that routes match and keys read, so that no spelling an upstream
//! would route to a limited resource slips past its limit; and the one place that decides
//! whether a route's path matches it ([`PathPattern`]).
//!
//! Upstreams disagree on what a path means: Tomcat, Spring and Jetty drop `;params` from each
//! segment, some decode `%2F` to `/` or treat `\` as `/`, most resolve `.` and `..`, many match
//! case-insensitively or ignore a trailing slash; Node's `new URL(target, base)` reads a target
//! starting with `//` as a host and a path; Windows servers drop a segment's trailing dots and
//! spaces, and Python's `str.strip()` any Unicode whitespace; Rails `(.:format)` routes and
//! Spring's suffix matching send `/x.json` to the action of `/x`. sluice matches the most
//! inclusive reading (matching more paths errs on the strict side) and refuses what it cannot
//! read the same way as every upstream: encoded separators, backslashes, control characters,
//! their double-encoded forms, a leading `//`, and segments ending in a dot or whitespace.

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
    /// The path starts with `//`, as sent or once its dot segments are resolved (`/..//x`,
    /// `/%2e//x`): a URL parser given it as a reference (Node's `new URL(req.url, base)`)
    /// reads the first segment as a host and routes the rest (`//evil/api/items` is
    /// `/api/items`), while sluice would read one path.
    #[error("The path starts with `//`, which URL parsers read as a host name followed by another path.")]
    LeadingDoubleSlash,
    /// A `..` right after an empty segment (`/api/password-reset//..`): a URL parser (RFC 3986,
    /// Node's `URL`) lets it drop the empty segment (`/api/password-reset/`), a server that
    /// merges slashes first (nginx, sluice's normal form) the segment before it (`/api`).
    #[error("The path has `..` after `//`, which servers resolve to different paths.")]
    DotDotAfterDoubleSlash,
    /// A segment ends in `.` (raw, `%2e`, or a Unicode full stop such as `%EF%BC%8E`) other
    /// than the dot segments `.` and `..`: Windows servers drop trailing dots, so
    /// `/api/password-reset.` and `/api./x` name `/api/password-reset` and `/api/x` to them.
    #[error("A segment of the path ends in `.`, which some servers drop.")]
    TrailingDot,
    /// A segment ends in whitespace (`%20`, `%C2%A0`, `%E3%80%80`, a Latin-1 `%A0`...):
    /// servers and applications that trim it (Windows, Python's `str.strip()`) read the path
    /// without it.
    #[error("A segment of the path ends in whitespace, which some servers trim.")]
    TrailingWhitespace,
}

/// A route's path, as it matches the normal form of requests' paths ([`request_path`]). Every
/// face that routes requests (the gateway, forward-auth, the simulator's judge) matches through
/// [`PathPattern::matches_normal`].
///
/// ```
/// use sluice_config::{PathPattern, PathShape};
/// let reset = PathPattern { shape: PathShape::Path("/api/password-reset".into()), exact: false };
/// assert!(reset.matches_normal("/api/password-reset"));
/// assert!(reset.matches_normal("/api/password-reset.json"), "Rails' (.:format), Spring's suffix match");
/// assert!(!reset.matches_normal("/api/password-resets") && !reset.matches_normal("/api/password-reset/x"));
/// let exact = PathPattern { exact: true, ..reset };
/// assert!(!exact.matches_normal("/api/password-reset.json"));
/// let api = PathPattern { shape: PathShape::Prefix("/api/".into()), exact: false };
/// assert!(api.matches_normal("/api") && api.matches_normal("/api.xml") && api.matches_normal("/api/x.json"));
/// assert!(!api.matches_normal("/apix"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    /// The path, or the prefix, in normal form.
    pub shape: PathShape,
    /// Only the path as written (`exact = true`). Otherwise a format suffix on the last segment
    /// matches too (`/x.json`, `/x.tar.gz`; for `/api/*`, `/api.json`): applications that route
    /// those to the action of `/x` (Rails, Spring) would otherwise serve them unlimited.
    pub exact: bool,
}

/// Which paths a [`PathPattern`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathShape {
    /// This path only.
    Path(String),
    /// Paths that start with this prefix (which ends in `/`), and the prefix without it.
    Prefix(String),
}

impl PathPattern {
    /// True when `path` (no query string) matches, after [`normalize_path`].
    pub fn matches(&self, path: &str) -> bool {
        self.matches_normal(&normalize_path(path))
    }

    /// True when `path`, already in normal form ([`request_path`]), matches.
    pub fn matches_normal(&self, path: &str) -> bool {
        let whole = match &self.shape {
            PathShape::Path(p) => p.as_str(),
            PathShape::Prefix(p) if path.starts_with(p.as_str()) => return true,
            PathShape::Prefix(p) => &p[..p.len() - 1],
        };
        match path.strip_prefix(whole) {
            Some("") => true,
            // `.ext` on the last segment: the rest holds no `/`.
            Some(rest) => !self.exact && rest.starts_with('.') && !rest.contains('/'),
            None => false,
        }
    }
}

impl std::fmt::Display for PathPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shape {
            PathShape::Path(p) => f.write_str(p),
            PathShape::Prefix(p) => write!(f, "{p}*"),
        }
    }
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
/// Refused: encoded separators, backslashes, control characters, double encodings, a leading
/// `//` (as sent or once dot segments are resolved), a segment ending in `.` or whitespace
/// (however spelled). A `//` further on is one `/`, as before.
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
/// assert_eq!(request_path("//127.0.0.1/api/items"), Err(PathRefusal::LeadingDoubleSlash));
/// assert_eq!(request_path("/api/password-reset."), Err(PathRefusal::TrailingDot));
/// assert_eq!(request_path("/api/password-reset%20"), Err(PathRefusal::TrailingWhitespace));
/// assert_eq!(request_path("/api//items.json").unwrap(), "/api/items.json");
/// ```
pub fn request_path(path: &str) -> Result<Cow<'_, str>, PathRefusal> {
    // Already normal (the common case, `/api/v1/items.json`): borrowed, nothing allocated.
    if already_normal(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    check(path)?;
    Ok(Cow::Owned(normalize(path)))
}

/// True when `path` is its own normal form, read in one pass (every request is): a `/`, then
/// only lower-case letters, digits and `-_~./`, with no empty segment (`//`, a trailing `/`)
/// and no segment ending in a dot (`.`, `..`, `x.`). `/` alone is normal.
fn already_normal(path: &[u8]) -> bool {
    let [b'/', rest @ ..] = path else { return false };
    if rest.is_empty() {
        return true;
    }
    // By a table of each byte's class: a byte costs a load and two tests.
    let mut previous = SLASH;
    for &b in rest {
        let class = CLASS[usize::from(b)];
        // A byte outside the set; or a `/` after `/` (an empty segment) or after `.` (a
        // segment ending in a dot).
        if class == OUTSIDE || (class == SLASH && previous != PLAIN) {
            return false;
        }
        previous = class;
    }
    previous == PLAIN
}

/// The classes of [`CLASS`].
const OUTSIDE: u8 = 0;
const PLAIN: u8 = 1;
const SLASH: u8 = 2;
const DOT: u8 = 3;

/// What [`already_normal`] makes of each byte: a lower-case letter, a digit or one of `-_~`
/// is `PLAIN`; `/` and `.` are their own; anything else is `OUTSIDE` the normal form.
const CLASS: [u8; 256] = {
    let mut table = [OUTSIDE; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' => PLAIN,
            b'/' => SLASH,
            b'.' => DOT,
            _ => OUTSIDE,
        };
        b += 1;
    }
    table
};

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
    // Segment by segment, as `normalize` reads them: which end in a dot or whitespace; and,
    // resolving dot segments as URL parsers do (empty segments kept), whether a `..` drops an
    // empty segment or the result starts with one (`//`).
    let mut kept_empty: Vec<bool> = Vec::new();
    for raw in path.strip_prefix('/').unwrap_or(path).split('/') {
        let seg = percent_decoded(params_cut(raw));
        match seg.as_slice() {
            b"." => {}
            b".." => {
                if kept_empty.pop() == Some(true) {
                    return Err(PathRefusal::DotDotAfterDoubleSlash);
                }
            }
            _ => {
                check_ending(&seg)?;
                kept_empty.push(seg.is_empty());
            }
        }
    }
    if kept_empty.len() > 1 && kept_empty[0] {
        return Err(PathRefusal::LeadingDoubleSlash);
    }
    Ok(())
}

/// Characters that NFKC (and so some applications) reads as `.`: one dot leader, small full
/// stop, fullwidth full stop.
const COMPATIBLE_FULL_STOPS: [char; 3] = ['\u{2024}', '\u{fe52}', '\u{ff0e}'];

/// Refuses a decoded segment that ends in a dot or whitespace — or whose stem before any `.`
/// does, since an application that drops a format suffix first (`/x%20.json` is `/x ` to Rails,
/// then `/x` once trimmed) reads that stem as the segment.
fn check_ending(seg: &[u8]) -> Result<(), PathRefusal> {
    check_end(seg)?;
    for (i, _) in seg.iter().enumerate().filter(|(i, b)| **b == b'.' && *i > 0) {
        check_end(&seg[..i])?;
    }
    Ok(())
}

/// Refuses a decoded segment that ends in a dot or whitespace, in UTF-8 or, when the segment is
/// not UTF-8, as a Latin-1 reader sees it (NBSP `%A0`, NEL `%85`).
fn check_end(seg: &[u8]) -> Result<(), PathRefusal> {
    let last = match std::str::from_utf8(seg) {
        Ok(text) => text.chars().next_back(),
        Err(_) => seg.last().map(|&b| char::from(b)),
    };
    match last {
        Some(c) if c == '.' || COMPATIBLE_FULL_STOPS.contains(&c) => Err(PathRefusal::TrailingDot),
        Some(c) if c.is_whitespace() => Err(PathRefusal::TrailingWhitespace),
        _ => Ok(()),
    }
}

/// A segment up to its first `;` (raw or `%3B`): what servers that drop parameters keep.
fn params_cut(raw: &str) -> &str {
    let bytes = raw.as_bytes();
    let end = (0..bytes.len())
        .find(|&i| bytes[i] == b';' || (bytes[i] == b'%' && hex_at(bytes, i + 1) == Some(b';')))
        .unwrap_or(bytes.len());
    &raw[..end]
}

/// Every `%XX` escape of `raw` decoded (a `%` without two hex digits is kept as it is).
fn percent_decoded(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex_at(bytes, i + 1)) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
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
    let raw = params_cut(raw);
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%'
            && let Some(v) = hex_at(bytes, i + 1)
        {
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
            "/api//password-reset",
            "/api///password-reset//",
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

    #[test]
    fn a_leading_double_slash_is_refused_however_it_is_reached() {
        for path in [
            "//127.0.0.1/api/items",
            "//evil/api/items",
            "//",
            "///api/items",
            "/..//evil/api/items",
            "/.//evil/api/items",
            "/%2e//evil/api/items",
            "/%2E%2e//evil/api/items",
            "/x/..//evil/api/items",
            "/x/%2e%2e//evil",
            "/.;a//evil/api/items",
            "/x/../..//evil",
            "/x/..//",
        ] {
            assert_eq!(request_path(path), Err(PathRefusal::LeadingDoubleSlash), "{path}");
        }
        // Further on, `//` is one `/`; dot segments that leave one `/` are fine.
        for (path, normal) in [
            ("/api//items", "/api/items"),
            ("/api/items//", "/api/items"),
            ("/x/../api//items", "/api/items"),
            ("/x/../", "/"),
            ("/./api", "/api"),
            ("/..", "/"),
            ("/", "/"),
        ] {
            assert_eq!(request_path(path).as_deref(), Ok(normal), "{path}");
        }
    }

    #[test]
    fn dot_dot_after_a_double_slash_is_refused() {
        for path in ["/api/password-reset//..", "/api//%2e%2e", "/a//../b", "/a/.//../b", "/a//..;x/b"] {
            assert_eq!(request_path(path), Err(PathRefusal::DotDotAfterDoubleSlash), "{path}");
        }
        // `..` after a segment, or after a trailing slash's end, is resolved as before.
        assert_eq!(request_path("/api/x/../password-reset").as_deref(), Ok("/api/password-reset"));
        assert_eq!(request_path("/api/x/..//password-reset").as_deref(), Ok("/api/password-reset"));
    }

    #[test]
    fn a_segment_ending_in_a_dot_or_whitespace_is_refused_however_spelled() {
        for path in [
            "/api/password-reset.",
            "/api/password-reset%2e",
            "/api/password-reset%2E",
            "/api/password-reset..",
            "/api/password-reset...",
            "/api/password-reset./",
            "/api/password-reset.;x=1",
            "/api./password-reset",
            "/api/password-reset%ef%bc%8e",
            "/api/password-reset%EF%B9%92",
            "/api/password-reset%e2%80%a4",
            "/api/...",
        ] {
            assert_eq!(request_path(path), Err(PathRefusal::TrailingDot), "{path}");
        }
        for path in [
            "/api/password-reset%20",
            "/api/password-reset%20/",
            "/api/password-reset%20;x",
            "/api%20/password-reset",
            "/api/x/..%20/password-reset",
            "/api/x/.%20",
            "/api/password-reset%c2%a0",
            "/api/password-reset%C2%85",
            "/api/password-reset%e3%80%80",
            "/api/password-reset%e2%80%82",
            "/api/password-reset%e2%80%a8",
            "/api/password-reset%a0",
            "/api/password-reset%85",
            "/api/password-reset ",
            // Before a format suffix: `password-reset ` to an application that drops `.json`.
            "/api/password-reset%20.json",
            "/api/password-reset%C2%A0.xml.gz",
        ] {
            assert_eq!(request_path(path), Err(PathRefusal::TrailingWhitespace), "{path}");
        }
        // Tabs, line feeds and other controls were refused before, as controls.
        assert_eq!(request_path("/api/password-reset%09"), Err(PathRefusal::Control));
        // Dots and spaces inside a segment, dot segments, and UTF-8 ending in byte A0 stay.
        for (path, normal) in [
            ("/api/v1.2/items.json", "/api/v1.2/items.json"),
            ("/files/my%20report.pdf", "/files/my%20report.pdf"),
            ("/wiki/voil%C3%A0", "/wiki/voil%c3%a0"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a/./b/../c", "/a/c"),
            ("/a/b;x=1./c", "/a/b/c"),
        ] {
            assert_eq!(request_path(path).as_deref(), Ok(normal), "{path}");
        }
    }

    fn path_route(p: &str) -> PathPattern {
        PathPattern { shape: PathShape::Path(p.into()), exact: false }
    }

    fn prefix_route(p: &str) -> PathPattern {
        PathPattern { shape: PathShape::Prefix(p.into()), exact: false }
    }

    #[test]
    fn a_format_suffix_on_the_last_segment_matches_unless_the_route_is_exact() {
        let reset = path_route("/api/password-reset");
        for spelling in [
            "/api/password-reset",
            "/api/password-reset.json",
            "/api/password-reset.xml",
            "/api/password-reset.tar.gz",
            "/api/password-reset..json",
        ] {
            assert!(reset.matches_normal(spelling), "{spelling}");
            assert!(reset.matches(&spelling.to_ascii_uppercase()), "{spelling}");
        }
        for other in ["/api/password-resets", "/api/password-reset/x", "/api/password-reset.json/x", "/api/password"] {
            assert!(!reset.matches_normal(other), "{other}");
        }
        let exact = PathPattern { exact: true, ..reset };
        assert!(exact.matches_normal("/api/password-reset"));
        assert!(!exact.matches_normal("/api/password-reset.json"));

        let api = prefix_route("/api/");
        for spelling in ["/api", "/api.json", "/api/x", "/api/x.json", "/api/x/y.tar.gz", "/api.v2.xml"] {
            assert!(api.matches_normal(spelling), "{spelling}");
        }
        for other in ["/apix", "/apix.json", "/ap", "/api.json/x"] {
            assert!(!api.matches_normal(other), "{other}");
        }
        let exact_api = PathPattern { exact: true, ..api };
        assert!(exact_api.matches_normal("/api") && exact_api.matches_normal("/api/x.json"));
        assert!(!exact_api.matches_normal("/api.json"));
        // `/*` is every path; `/` alone is the root and its suffixes.
        assert!(prefix_route("/").matches_normal("/anything.json") && prefix_route("/").matches_normal("/"));
        assert!(path_route("/").matches_normal("/.json") && !path_route("/").matches_normal("/x"));
    }

    /// Every escape decoded once.
    fn decode_once(path: &str) -> Option<String> {
        String::from_utf8(percent_decoded(path)).ok()
    }

    /// Decodes like a permissive upstream would: every escape once, `\` as `/`, params dropped,
    /// slashes merged before dot segments are resolved (as nginx does).
    fn upstream_reading(path: &str) -> Option<String> {
        let text = decode_once(path)?.replace('\\', "/");
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

    /// Which liberties an application's reading of a path takes.
    #[derive(Debug, Clone, Copy)]
    struct Liberties {
        /// A leading `//` starts a host, as sent (Node's `new URL(req.url, base)`).
        authority: bool,
        /// The same, once dot segments are resolved (`/..//evil/x`), by a reader that parses
        /// the resolved path again.
        authority_resolved: bool,
        /// Trailing dots and whitespace dropped from each segment (Windows, `str.strip()`).
        trim: bool,
        /// A `.ext` dropped from the last segment (Rails' `(.:format)`, Spring's suffix match).
        suffix: bool,
    }

    /// The path whose host a leading `//` names dropped (`//evil/x` is `/x`), else `text`.
    fn without_authority(text: &str) -> &str {
        match text.strip_prefix("//") {
            Some(after) => after.find('/').map_or("/", |i| &after[i..]),
            None => text,
        }
    }

    /// Dot segments resolved, empty segments kept (RFC 3986's remove_dot_segments, as URL
    /// parsers do): `/x/..//evil` is `//evil`.
    fn resolved_keeping_empty(segs: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in segs {
            match s.as_str() {
                "." => {}
                ".." => {
                    out.pop();
                }
                _ => out.push(s.clone()),
            }
        }
        out
    }

    /// What an application acts on for `decoded` (a path with its escapes decoded): `\` as
    /// `/`, parameters dropped, case folded, dot segments resolved, repeated slashes ignored,
    /// and the `liberties` taken.
    fn application_reading(decoded: &str, liberties: Liberties) -> String {
        let text = decoded.replace('\\', "/");
        let text = if liberties.authority { without_authority(&text) } else { &text };
        let mut segs: Vec<String> = text
            .strip_prefix('/')
            .unwrap_or(text)
            .split('/')
            .map(|s| s.split(';').next().unwrap_or("").to_lowercase())
            .collect();
        if liberties.trim {
            for s in segs.iter_mut().filter(|s| *s != "." && *s != "..") {
                *s = s
                    .trim_end_matches(|c: char| c == '.' || c.is_whitespace() || COMPATIBLE_FULL_STOPS.contains(&c))
                    .into();
            }
        }
        let mut segs = resolved_keeping_empty(&segs);
        if liberties.authority_resolved {
            let again = format!("/{}", segs.join("/"));
            segs = without_authority(&again).split('/').skip(1).map(str::to_string).collect();
        }
        segs.retain(|s| !s.is_empty());
        if liberties.suffix
            && let Some(last) = segs.last_mut()
            && let Some(dot) = last.get(1..).and_then(|s| s.find('.'))
        {
            last.truncate(dot + 1);
        }
        format!("/{}", segs.join("/"))
    }

    /// Every reading the differential test compares sluice with: decoded once or twice, each
    /// with every combination of the application's liberties.
    fn readings(path: &str) -> Vec<String> {
        let once = decode_once(path);
        let twice = once.as_deref().and_then(decode_once);
        let mut out = Vec::new();
        for decoded in [once, twice].into_iter().flatten() {
            for flags in 0..16u8 {
                let liberties = Liberties {
                    authority: flags & 1 != 0,
                    authority_resolved: flags & 2 != 0,
                    trim: flags & 4 != 0,
                    suffix: flags & 8 != 0,
                };
                out.push(application_reading(&decoded, liberties));
            }
        }
        out
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
                Just("password-reset.json".to_string()), Just("Password-Reset.XML".to_string()),
                Just("password-reset.tar.gz".to_string()), Just(".json".to_string()), Just("password-reset.".to_string()),
                Just("password-reset%2e".to_string()), Just("password-reset%20".to_string()),
                Just("password-reset%c2%a0".to_string()), Just("password-reset%ef%bc%8e".to_string()),
                Just("api.".to_string()), Just("api%20".to_string()), Just("..%20".to_string()), Just(".%20".to_string()),
                Just("127.0.0.1".to_string()), Just("evil".to_string()), Just("api.json".to_string()),
            ], 1..8),
            start in prop_oneof![
                4 => Just("/"), 1 => Just("//"), 1 => Just("//evil/"), 1 => Just("//127.0.0.1/"), 1 => Just("/..//"),
                1 => Just("/.//"), 1 => Just("/%2e%2e//evil/"), 1 => Just("/x/..//"),
            ],
        ) {
            let path = format!("{start}{}", parts.join("/"));
            // Upstreams that decode once, and the few that decode twice.
            let once = upstream_reading(&path);
            let twice = decode_once(&path).and_then(|p| upstream_reading(&p));
            // Refused is fine; matched must be matched as the limited path.
            if let Ok(ours) = request_path(&path)
                && (once.as_deref() == Some("/api/password-reset") || twice.as_deref() == Some("/api/password-reset"))
            {
                prop_assert_eq!(ours.as_ref(), "/api/password-reset", "{}", path);
            }
            // Rails, Spring, Node and Windows readings too, against a path route and a prefix
            // route: what any of them acts on as the limited path, sluice matches or refuses.
            if let Ok(ours) = request_path(&path) {
                let (reset, api) = (path_route("/api/password-reset"), prefix_route("/api/"));
                for read in readings(&path) {
                    if read == "/api/password-reset" {
                        prop_assert!(reset.matches_normal(&ours), "{} read as {}, sluice: {}", path, read, ours);
                    }
                    if read == "/api" || read.starts_with("/api/") {
                        prop_assert!(api.matches_normal(&ours), "{} read as {}, sluice: {}", path, read, ours);
                    }
                }
            }
        }

        /// The one-pass test of an already normal path says what its first, plainer wording
        /// (four passes) said, on paths made of what it looks at.
        #[test]
        fn the_one_pass_normal_test_agrees_with_its_plain_wording(path in "[/a-zA-Z0-9._~%;-]{0,24}") {
            let plain = path.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_~./".contains(&b))
                && !path.contains("//")
                && (path.len() <= 1 || !path.ends_with('/'))
                && path.split('/').all(|seg| !seg.ends_with('.'))
                && path.starts_with('/');
            prop_assert_eq!(already_normal(path.as_bytes()), plain, "{}", path);
        }

        /// The same with any one byte put in (the byte table reads every value, not only a path's):
        /// controls, upper case, `%`, `\\` and every byte above 0x7F are outside the normal form.
        #[test]
        fn the_byte_table_agrees_with_the_plain_wording_on_any_bytes(
            normal in "/[a-z0-9._~/-]{0,20}", at in any::<usize>(), byte in any::<u8>()
        ) {
            // A path of the normal alphabet with any one byte put in anywhere.
            let mut path = normal.into_bytes();
            path.insert(at % (path.len() + 1), byte);
            let plain = path.iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_~./".contains(&b))
                && !path.windows(2).any(|w| w == b"//")
                && (path.len() <= 1 || path.last() != Some(&b'/'))
                && path.split(|&b| b == b'/').all(|seg| seg.last() != Some(&b'.'))
                && path.first() == Some(&b'/');
            prop_assert_eq!(already_normal(&path), plain, "{:?}", path);
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
