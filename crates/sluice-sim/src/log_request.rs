//! One request read from an access log: when, from which address, method, path and the headers
//! the log carries. Owned and reused from line to line, so reading a log allocates nothing per
//! line once the buffers have grown.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use sluice_core::Nanos;
use thiserror::Error;

use crate::log_time::TimeError;

/// Why a log line could not be read as a request. Shown with the line's number.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    /// Nothing on the line.
    #[error("empty line")]
    Empty,
    /// Longer than the reader takes ([`crate::MAX_LINE_BYTES`]).
    #[error("longer than {0} bytes")]
    TooLong(usize),
    /// A field the format needs is missing.
    #[error("no {0}")]
    Missing(String),
    /// A field is there but cannot be read.
    #[error("{field} `{value}` {problem}")]
    Bad {
        /// Which field.
        field: String,
        /// Its text, cut to 40 bytes.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The time cannot be read.
    #[error("time: {0}")]
    Time(#[from] TimeError),
    /// A JSON line that is not a JSON object, or a field of the wrong type.
    #[error("JSON: {0}")]
    Json(String),
}

impl LineError {
    /// A field whose text is not what it should be.
    pub fn bad(field: &str, value: &[u8], problem: &'static str) -> Self {
        LineError::Bad {
            field: field.to_string(),
            value: String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned(),
            problem,
        }
    }
}

/// A request read from a log line. Parsers fill it with [`LogRequest::clear`] and the `set_`
/// methods; the simulation reads it through the accessors.
#[derive(Debug, Clone)]
pub struct LogRequest {
    /// The line it was read from, counting from 1 (within its log, when there are several).
    pub line: u64,
    /// Which of the logs of a run it was read from, counting from 0 (0 with one log).
    pub source: usize,
    /// When the log says it came, Unix nanoseconds.
    pub at: Nanos,
    /// The address that connected (nginx `$remote_addr`): the peer the gateway would have seen.
    pub peer: IpAddr,
    /// The response's body bytes, where the log has them (nginx `$body_bytes_sent`, Apache
    /// `%b`): what a `cost_from = "response-bytes"` limit is settled to.
    pub sent: Option<u64>,
    /// How long the request was in flight, where the log has it (nginx `$request_time`): how
    /// long it holds a concurrency limit's slot.
    pub took: Option<Nanos>,
    /// Method and path, one after the other (text, checked once when pushed).
    text: String,
    /// Where the method is in `text`.
    method: (u32, u32),
    /// Where the path (query string removed) is in `text`.
    path: (u32, u32),
    /// Header values, one after the other (bytes: a header need not be UTF-8).
    bytes: Vec<u8>,
    /// The headers present: index into the format's header names, and the value's span in
    /// `bytes`.
    headers: Vec<(usize, (u32, u32))>,
}

impl Default for LogRequest {
    fn default() -> Self {
        Self {
            line: 0,
            source: 0,
            at: 0,
            peer: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            sent: None,
            took: None,
            text: String::new(),
            bytes: Vec::new(),
            method: (0, 0),
            path: (0, 0),
            headers: Vec::new(),
        }
    }
}

impl LogRequest {
    /// Empties the request for the next line, keeping its buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.bytes.clear();
        self.headers.clear();
        self.method = (0, 0);
        self.path = (0, 0);
        self.sent = None;
        self.took = None;
    }

    /// The method as logged (the gateway matches methods as sent, case and all).
    pub fn method(&self) -> &str {
        self.text(self.method)
    }

    /// The path as logged, without its query string or fragment.
    pub fn path(&self) -> &str {
        self.text(self.path)
    }

    /// The headers the line carries, as (index into the format's header names, value).
    pub fn headers(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        self.headers.iter().map(|&(i, (start, end))| (i, &self.bytes[start as usize..end as usize]))
    }

    fn text(&self, (start, end): (u32, u32)) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// Appends `raw` to the header bytes, unescaped when `escaped`, and returns its span.
    fn push(&mut self, raw: &[u8], escaped: bool) -> (u32, u32) {
        let start = self.bytes.len();
        if escaped {
            unescape_into(raw, &mut self.bytes);
        } else {
            self.bytes.extend_from_slice(raw);
        }
        (start as u32, self.bytes.len() as u32)
    }

    /// Appends `raw` to the text: bytes that are not UTF-8 become U+FFFD (such a method or path
    /// cannot match a route anyway).
    fn push_text(&mut self, raw: &[u8]) -> (u32, u32) {
        let start = self.text.len();
        match std::str::from_utf8(raw) {
            Ok(t) => self.text.push_str(t),
            Err(_) => self.text.push_str(&String::from_utf8_lossy(raw)),
        }
        (start as u32, self.text.len() as u32)
    }

    /// Sets the method.
    pub fn set_method(&mut self, method: &[u8]) {
        self.method = self.push_text(method);
    }

    /// Sets the path from a request target: origin form (`/a?b`), absolute form
    /// (`http://host/a?b`, whose path is `/a`), or anything else as it is (`*`). The query
    /// string and fragment are removed.
    pub fn set_target(&mut self, target: &[u8]) {
        let path = match target.windows(3).position(|w| w == b"://") {
            Some(i) if target.first() != Some(&b'/') => {
                let after = &target[i + 3..];
                let start = after.iter().position(|&b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(after.len());
                let path = &after[start..];
                if path.first() == Some(&b'/') { path } else { b"/".as_slice() }
            }
            _ => target,
        };
        let end = path.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(path.len());
        self.path = self.push_text(&path[..end]);
    }

    /// Adds header number `index` (of the format's header names) with `value`, unescaped when
    /// `escaped`. An empty value or `-` (what nginx and Apache write for an absent header) adds
    /// nothing: the header is absent, as it was from the request.
    pub fn add_header(&mut self, index: usize, value: &[u8], escaped: bool) {
        if value.is_empty() || value == b"-" {
            return;
        }
        let span = self.push(value, escaped);
        self.headers.push((index, span));
    }

    /// Sets the body bytes sent from a log's field: digits, or `-` (Apache's `%b` for none).
    pub fn set_sent(&mut self, field: &str, value: &[u8]) -> Result<(), LineError> {
        self.sent = match value {
            b"-" => Some(0),
            digits if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
                let n = std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok());
                Some(n.ok_or_else(|| LineError::bad(field, value, "is too large"))?)
            }
            _ => return Err(LineError::bad(field, value, "is not a number or -")),
        };
        Ok(())
    }

    /// Sets how long the request was in flight from a number of seconds (`0.153`, nginx's
    /// `$request_time`); `-` leaves it unknown.
    pub fn set_took(&mut self, field: &str, value: &[u8]) -> Result<(), LineError> {
        if value == b"-" {
            self.took = None;
            return Ok(());
        }
        let text =
            std::str::from_utf8(value).map_err(|_| LineError::bad(field, value, "is not a number of seconds"))?;
        self.took = Some(
            crate::decimal::parse_seconds(text)
                .map_err(|_| LineError::bad(field, value, "is not a number of seconds"))?,
        );
        Ok(())
    }

    /// Sets method and path from a request line `METHOD TARGET [PROTOCOL]` (nginx `$request`).
    pub fn set_request_line(&mut self, line: &[u8], escaped: bool) -> Result<(), LineError> {
        let owned;
        let line = if escaped {
            let mut v = Vec::with_capacity(line.len());
            unescape_into(line, &mut v);
            owned = v;
            &owned[..]
        } else {
            line
        };
        let bad = || LineError::bad("request", line, "is not an HTTP request line (METHOD TARGET PROTOCOL)");
        let mut parts = line.split(|&b| b == b' ');
        let method = parts.next().filter(|m| !m.is_empty() && m.iter().all(|&b| is_token(b))).ok_or_else(bad)?;
        let target = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
        match (parts.next(), parts.next()) {
            (None, _) => {}
            (Some(proto), None) if proto.starts_with(b"HTTP/") => {}
            _ => return Err(bad()),
        }
        self.set_method(method);
        self.set_target(target);
        Ok(())
    }
}

/// An RFC 9110 token character (methods are tokens).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Undoes the escapes nginx and Apache write in quoted log fields: `\xHH`, `\"`, `\\`, and
/// Apache's `\n`, `\r`, `\t`. An unknown escape is kept as written.
pub(crate) fn unescape_into(raw: &[u8], out: &mut Vec<u8>) {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 == raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let (value, used) = match raw[i + 1] {
            b'x' | b'X' => match (raw.get(i + 2).copied().and_then(hex), raw.get(i + 3).copied().and_then(hex)) {
                (Some(h), Some(l)) => (Some(h * 16 + l), 4),
                _ => (None, 1),
            },
            b'"' => (Some(b'"'), 2),
            b'\\' => (Some(b'\\'), 2),
            b'n' => (Some(b'\n'), 2),
            b'r' => (Some(b'\r'), 2),
            b't' => (Some(b'\t'), 2),
            _ => (None, 1),
        };
        out.push(value.unwrap_or(b'\\'));
        i += used;
    }
}

/// Reads a logged client address: `203.0.113.7`, `2001:db8::1`, or either with a port
/// (`203.0.113.7:5123`, `[2001:db8::1]:443`).
pub fn parse_address(text: &[u8]) -> Result<IpAddr, LineError> {
    let s = std::str::from_utf8(text).map_err(|_| LineError::bad("address", text, "is not an IP address"))?;
    s.parse::<IpAddr>()
        .or_else(|_| s.parse::<SocketAddr>().map(|a| a.ip()))
        .map_err(|_| LineError::bad("address", text, "is not an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_lose_their_query_and_their_host() {
        let mut r = LogRequest::default();
        for (target, path) in [
            ("/api/login?user=x", "/api/login"),
            ("/a#frag", "/a"),
            ("http://example.com/api/x?y", "/api/x"),
            ("http://example.com", "/"),
            ("http://example.com?q", "/"),
            ("*", "*"),
            ("/redirect?to=http://x/", "/redirect"),
        ] {
            r.clear();
            r.set_target(target.as_bytes());
            assert_eq!(r.path(), path, "{target}");
        }
    }

    #[test]
    fn request_lines_need_a_method_and_a_target() {
        let mut r = LogRequest::default();
        r.set_request_line(b"GET /x?y HTTP/1.1", false).unwrap();
        assert_eq!((r.method(), r.path()), ("GET", "/x"));
        r.clear();
        r.set_request_line(b"GET /old", false).unwrap();
        assert_eq!(r.path(), "/old");
        r.clear();
        r.set_request_line(br"GET /a\x22b HTTP/1.1", true).unwrap();
        assert_eq!(r.path(), "/a\"b");
        for bad in [&b"-"[..], b"", b"\x16\x03\x01", b"GET", b"GET  /x", b"G(T /x HTTP/1.1", b"GET /x HTTP/1.1 extra"] {
            assert!(r.set_request_line(bad, false).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn escapes_of_nginx_and_apache_are_undone() {
        let mut out = Vec::new();
        unescape_into(br#"a\x22b\"c\\d\te\q\x4"#, &mut out);
        assert_eq!(out, b"a\"b\"c\\d\te\\q\\x4");
    }

    #[test]
    fn absent_headers_are_not_added() {
        let mut r = LogRequest::default();
        r.add_header(0, b"-", false);
        r.add_header(1, b"", false);
        r.add_header(2, b"curl/8", false);
        assert_eq!(r.headers().collect::<Vec<_>>(), [(2, &b"curl/8"[..])]);
    }

    #[test]
    fn addresses_may_carry_a_port() {
        assert_eq!(parse_address(b"203.0.113.7").unwrap().to_string(), "203.0.113.7");
        assert_eq!(parse_address(b"203.0.113.7:80").unwrap().to_string(), "203.0.113.7");
        assert_eq!(parse_address(b"[2001:db8::1]:443").unwrap().to_string(), "2001:db8::1");
        assert!(parse_address(b"unix:").is_err());
        assert!(parse_address(b"example.com").is_err());
    }
}
