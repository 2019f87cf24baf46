//! Finding a request's bearer token: one `Authorization: Bearer TOKEN` line (or the configured
//! header), or one cookie of the configured name. Anything ambiguous is malformed, never "pick
//! one".

use http::HeaderMap;
use http::header::COOKIE;
use sluice_config::TokenSource;

/// The longest token read (bytes): longer ones are malformed, so a huge header costs no
/// verification and no cache room.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// What a request carries where the token is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found<'a> {
    /// No token (no such header or cookie, or another authentication scheme).
    Absent,
    /// The token header came in several lines: which one an application reads is its own
    /// choice, so no line is read (answered 400, like any repeated keyed header).
    Repeated,
    /// Something that cannot be one token: several lines or cookies, a bearer credential that
    /// is not a compact JWS, one too long.
    Malformed,
    /// A token of the compact form `header.payload.signature`, not yet verified.
    Token(&'a str),
}

/// The token `source` names in `headers`.
///
/// ```
/// use sluice_config::TokenSource;
/// use sluice_http::jwt::{Found, find_token};
/// let auth = TokenSource::Header("authorization".into());
/// let mut h = http::HeaderMap::new();
/// assert_eq!(find_token(&h, &auth), Found::Absent);
/// h.insert("authorization", "Bearer a.b.c".parse().unwrap());
/// assert_eq!(find_token(&h, &auth), Found::Token("a.b.c"));
/// h.append("authorization", "Bearer d.e.f".parse().unwrap());
/// assert_eq!(find_token(&h, &auth), Found::Repeated, "two lines: never pick one");
/// let cookie = TokenSource::Cookie("session".into());
/// let mut h = http::HeaderMap::new();
/// h.insert("cookie", "theme=dark; session=a.b.c".parse().unwrap());
/// assert_eq!(find_token(&h, &cookie), Found::Token("a.b.c"));
/// ```
pub fn find_token<'a>(headers: &'a HeaderMap, source: &TokenSource) -> Found<'a> {
    match source {
        TokenSource::Header(name) => {
            let mut lines = headers.get_all(name.as_str()).iter();
            match (lines.next(), lines.next()) {
                (None, _) => Found::Absent,
                (Some(_), Some(_)) => Found::Repeated,
                (Some(line), None) => bearer(line.as_bytes()),
            }
        }
        TokenSource::Cookie(name) => {
            let mut found = Found::Absent;
            for line in headers.get_all(COOKIE) {
                for pair in line.as_bytes().split(|&b| b == b';') {
                    let pair = pair.trim_ascii();
                    let Some(value) = pair.strip_prefix(name.as_bytes()).and_then(|r| r.strip_prefix(b"=")) else {
                        continue;
                    };
                    if found != Found::Absent {
                        return Found::Malformed;
                    }
                    let value = value.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(value);
                    found = compact(value);
                }
            }
            found
        }
    }
}

/// A credential line: `Bearer` (any case), one space, the token. Another scheme is no token;
/// a `Bearer` line in any other shape (a tab or two spaces after the scheme, padding, a
/// missing token) is malformed: lenient applications still read a token from it, so it is
/// never taken for "no token".
fn bearer(line: &[u8]) -> Found<'_> {
    let end = line.iter().position(|&b| b == b' ' || b == b'\t').unwrap_or(line.len());
    let (scheme, rest) = line.split_at(end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return if line.is_empty() { Found::Malformed } else { Found::Absent };
    }
    match rest.strip_prefix(b" ") {
        Some(token) => compact(token),
        None => Found::Malformed,
    }
}

/// `rest` if it has the form of a compact JWS: three base64url segments, two dots.
fn compact(rest: &[u8]) -> Found<'_> {
    let shaped = !rest.is_empty()
        && rest.len() <= MAX_TOKEN_BYTES
        && rest.iter().filter(|&&b| b == b'.').count() == 2
        && rest.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    match std::str::from_utf8(rest) {
        Ok(token) if shaped => Found::Token(token),
        _ => Found::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(lines: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("authorization", http::HeaderValue::from_bytes(l).unwrap());
        }
        h
    }

    #[test]
    fn bearer_lines_are_read_strictly() {
        let src = TokenSource::Header("authorization".into());
        // What the lines amount to, owned (the token borrows the headers).
        let find = |lines: &[&[u8]]| match find_token(&auth(lines), &src) {
            Found::Token(t) => Found::Token(if t == "x.y.z" { "x.y.z" } else { "another token" }),
            Found::Absent => Found::Absent,
            Found::Repeated => Found::Repeated,
            Found::Malformed => Found::Malformed,
        };
        assert_eq!(find(&[b"bearer x.y.z"]), Found::Token("x.y.z"));
        assert_eq!(find(&[b"BEARER x.y.z"]), Found::Token("x.y.z"));
        assert_eq!(find(&[b"Basic dXNlcjpwdw=="]), Found::Absent);
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer  x.y.z",
            b"Bearer\tx.y.z",
            b"bearer \tx.y.z",
            b"Bearer x.y",
            b"Bearer x.y.z.w",
            b"Bearer x.y.z=",
            b"",
        ] {
            assert_eq!(find(&[bad]), Found::Malformed, "{:?}", String::from_utf8_lossy(bad));
        }
        let long = format!("Bearer a.b.{}", "c".repeat(MAX_TOKEN_BYTES));
        assert_eq!(find(&[long.as_bytes()]), Found::Malformed);
        assert_eq!(find(&[b"Bearer a.b.c", b"Bearer a.b.c"]), Found::Repeated, "even the same token twice");
        assert_eq!(find(&[b"Basic dXNlcjpwdw==", b"Bearer x.y.z"]), Found::Repeated);
    }

    #[test]
    fn a_cookie_named_twice_is_malformed_whichever_lines_carry_it() {
        let src = TokenSource::Cookie("s".into());
        let mut h = HeaderMap::new();
        h.append(COOKIE, "ss=a.b.c; s=\"d.e.f\"".parse().unwrap());
        assert_eq!(find_token(&h, &src), Found::Token("d.e.f"));
        h.append(COOKIE, "s=g.h.i".parse().unwrap());
        assert_eq!(find_token(&h, &src), Found::Malformed);
        let mut h = HeaderMap::new();
        h.append(COOKIE, "s=nodots".parse().unwrap());
        assert_eq!(find_token(&h, &src), Found::Malformed);
    }
}
