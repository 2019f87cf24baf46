//! The common and combined log formats of nginx and Apache:
//!
//! ```text
//! $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//! ```
//!
//! A line may stop after the size (the common format), and may go on after the user agent with
//! more fields; with [`CombinedFormat::forwarded_last`] the last quoted one of those is
//! `X-Forwarded-For` (nginx's `"$http_x_forwarded_for"` appended to `combined`, a common setup).
//! Quoted fields are unescaped as both servers escape them (`\xHH`, `\"`, `\\`).
//!
//! ```
//! use sluice_sim::{CombinedFormat, LogRequest};
//! let format = CombinedFormat { forwarded_last: true };
//! let mut r = LogRequest::default();
//! let line = br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /api/login?x=1 HTTP/1.1" 200 2326 "-" "curl/8.5" "203.0.113.7""#;
//! format.parse(line, &mut r).unwrap();
//! assert_eq!((r.peer.to_string(), r.method(), r.path()), ("10.0.0.1".to_string(), "GET", "/api/login"));
//! let names = CombinedFormat::HEADERS;
//! let headers: Vec<(&str, &[u8])> = r.headers().map(|(i, v)| (names[i], v)).collect();
//! assert_eq!(headers, [("user-agent", &b"curl/8.5"[..]), ("x-forwarded-for", b"203.0.113.7")]);
//! ```

use std::cell::Cell;

use sluice_core::Nanos;

use crate::log_request::{LineError, LogRequest, parse_address};
use crate::log_time::parse_clf_time;

/// How to read common and combined lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CombinedFormat {
    /// The last quoted field after the user agent is `X-Forwarded-For` (absent when no quoted
    /// field follows the user agent, or when it is `-`).
    pub forwarded_last: bool,
}

thread_local! {
    /// The last time read and its value: a busy log repeats each second on many lines.
    static LAST_TIME: Cell<([u8; 26], Nanos)> = const { Cell::new(([0; 26], 0)) };
}

/// [`parse_clf_time`], remembering the last time read.
fn clf_time(text: &[u8]) -> Result<Nanos, LineError> {
    let (last, at) = LAST_TIME.get();
    if last[..] == *text {
        return Ok(at);
    }
    let at = parse_clf_time(text)?;
    if let Ok(key) = <[u8; 26]>::try_from(text) {
        LAST_TIME.set((key, at));
    }
    Ok(at)
}

/// A read position in a line.
struct Cursor<'a> {
    /// The line.
    b: &'a [u8],
    /// The next byte to read.
    i: usize,
}

impl<'a> Cursor<'a> {
    fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }

    /// Consumes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let ok = self.b.get(self.i) == Some(&byte);
        self.i += usize::from(ok);
        ok
    }

    /// The bytes up to the next space (or the end); the space is left.
    fn bare(&mut self) -> &'a [u8] {
        let rest = &self.b[self.i.min(self.b.len())..];
        let n = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        self.i += n;
        &rest[..n]
    }

    /// A quoted field, the cursor on its opening quote: its raw content and whether it holds
    /// escapes. `None` when there is no quote here or it is never closed.
    fn quoted(&mut self) -> Option<(&'a [u8], bool)> {
        let open = self.i;
        if self.b.get(open) != Some(&b'"') {
            return None;
        }
        let start = open + 1;
        let mut i = start;
        let mut escaped = false;
        while let Some(off) = self.b.get(i..)?.iter().position(|&b| b == b'"' || b == b'\\') {
            let at = i + off;
            if self.b[at] == b'\\' {
                // The escaped byte is skipped, whatever it is.
                escaped = true;
                i = at + 2;
                continue;
            }
            self.i = at + 1;
            return Some((&self.b[start..at], escaped));
        }
        None
    }

    /// A space, then a quoted field.
    fn spaced_quoted(&mut self) -> Option<(&'a [u8], bool)> {
        if self.eat(b' ') { self.quoted() } else { None }
    }
}

impl CombinedFormat {
    /// The headers a combined line can carry, as [`LogRequest::headers`] indexes them.
    pub const HEADERS: [&'static str; 3] = ["referer", "user-agent", "x-forwarded-for"];

    /// The headers lines in this format may carry.
    pub fn header_names(&self) -> Vec<String> {
        let n = if self.forwarded_last { 3 } else { 2 };
        Self::HEADERS[..n].iter().map(|s| s.to_string()).collect()
    }

    /// Reads one line (without its line break) into `out`.
    pub fn parse(&self, line: &[u8], out: &mut LogRequest) -> Result<(), LineError> {
        out.clear();
        // Trailing blanks (a carriage return, a space a custom format left) are not a field.
        let end = line.iter().rposition(|&b| b != b' ' && b != b'\r' && b != b'\t').map_or(0, |i| i + 1);
        let line = &line[..end];
        if line.is_empty() {
            return Err(LineError::Empty);
        }
        let mut c = Cursor { b: line, i: 0 };
        let addr = c.bare();
        if addr.is_empty() {
            return Err(LineError::Missing("address at the start of the line".into()));
        }
        out.peer = parse_address(addr)?;
        // `- $remote_user ` up to the bracket: neither is used.
        let open = line[c.i..].iter().position(|&b| b == b'[').map(|o| c.i + o);
        let time = open.and_then(|o| line.get(o + 1..o + 27).filter(|_| line.get(o + 27) == Some(&b']')));
        let (Some(open), Some(time)) = (open, time) else {
            return Err(LineError::Missing("[time] like [10/Oct/2000:13:55:36 -0700]".into()));
        };
        out.at = clf_time(time)?;
        c.i = open + 28;
        let (request, escaped) = c.spaced_quoted().ok_or_else(|| LineError::Missing("quoted request".into()))?;
        out.set_request_line(request, escaped)?;
        if !c.eat(b' ') {
            return Err(LineError::Missing("status after the request".into()));
        }
        let status = c.bare();
        if status.is_empty() || !status.iter().all(u8::is_ascii_digit) {
            return Err(LineError::bad("status", status, "is not a number"));
        }
        if !c.eat(b' ') {
            return Err(LineError::Missing("size after the status".into()));
        }
        out.set_sent("size", c.bare())?;
        if c.at_end() {
            // The common format: no referer, no user agent.
            return Ok(());
        }
        let missing = || LineError::Missing("quoted referer and user agent after the size".into());
        let (referer, referer_escaped) = c.spaced_quoted().ok_or_else(missing)?;
        let (agent, agent_escaped) = c.spaced_quoted().ok_or_else(missing)?;
        out.add_header(0, referer, referer_escaped);
        out.add_header(1, agent, agent_escaped);
        // Whatever else the format appends: quoted fields and bare tokens.
        let mut last_quoted = None;
        while !c.at_end() {
            if !c.eat(b' ') {
                return Err(LineError::bad("field after the user agent", &line[c.i..], "is not separated by a space"));
            }
            if line.get(c.i) == Some(&b'"') {
                let rest = &line[c.i..];
                let field = c.quoted().ok_or_else(|| LineError::bad("field", rest, "has no closing quote"))?;
                last_quoted = Some(field);
            } else {
                c.bare();
            }
        }
        if self.forwarded_last
            && let Some((xff, escaped)) = last_quoted
        {
            out.add_header(2, xff, escaped);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::NANOS_PER_SEC;

    const APACHE: &[u8] = br#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;

    fn parse(format: CombinedFormat, line: &[u8]) -> Result<LogRequest, LineError> {
        let mut r = LogRequest::default();
        format.parse(line, &mut r).map(|()| r)
    }

    fn headers(r: &LogRequest) -> Vec<(&'static str, String)> {
        r.headers().map(|(i, v)| (CombinedFormat::HEADERS[i], String::from_utf8_lossy(v).into_owned())).collect()
    }

    #[test]
    fn the_apache_combined_example() {
        let r = parse(CombinedFormat::default(), APACHE).unwrap();
        assert_eq!(r.peer.to_string(), "127.0.0.1");
        assert_eq!(r.at, 971_211_336 * NANOS_PER_SEC);
        assert_eq!((r.method(), r.path()), ("GET", "/apache_pb.gif"));
        assert_eq!(
            headers(&r),
            [
                ("referer", "http://www.example.com/start.html".to_string()),
                ("user-agent", "Mozilla/4.08 [en] (Win98; I ;Nav)".to_string())
            ]
        );
    }

    #[test]
    fn the_common_format_has_no_headers() {
        let line = br#"2001:db8::7 - - [10/Oct/2000:13:55:36 +0000] "POST /login HTTP/1.1" 401 -"#;
        let r = parse(CombinedFormat::default(), line).unwrap();
        assert_eq!(r.peer.to_string(), "2001:db8::7");
        assert_eq!(r.method(), "POST");
        assert!(headers(&r).is_empty());
    }

    #[test]
    fn forwarded_for_is_the_last_quoted_field_after_the_agent() {
        let f = CombinedFormat { forwarded_last: true };
        let base = r#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "ua""#;
        let with = |tail: &str| parse(f, format!("{base}{tail}").as_bytes()).unwrap();
        assert_eq!(headers(&with(""))[0], ("user-agent", "ua".to_string()));
        assert_eq!(headers(&with("")).len(), 1);
        assert_eq!(headers(&with(r#" "1.2.3.4, 5.6.7.8""#))[1], ("x-forwarded-for", "1.2.3.4, 5.6.7.8".to_string()));
        assert_eq!(headers(&with(r#" "x" 0.003 "9.9.9.9""#))[1], ("x-forwarded-for", "9.9.9.9".to_string()));
        assert_eq!(headers(&with(r#" "-""#)).len(), 1);
        // Without the option the extra fields are read past and ignored.
        let r = parse(CombinedFormat::default(), format!("{base} \"9.9.9.9\" 0.01").as_bytes()).unwrap();
        assert_eq!(headers(&r).len(), 1);
    }

    #[test]
    fn escaped_quotes_stay_inside_their_field() {
        let line = br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /q\"x HTTP/1.1" 200 1 "-" "say \"hi\" \x5C""#;
        let r = parse(CombinedFormat::default(), line).unwrap();
        assert_eq!(r.path(), "/q\"x");
        assert_eq!(headers(&r)[0].1, r#"say "hi" \"#);
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases: [(&[u8], &str); 9] = [
            (b"", "empty line"),
            (b"- - - [x]", "address `-` is not an IP address"),
            (b"1.2.3.4 - - 10/Oct/2000:13:55:36 -0700 \"GET / HTTP/1.1\" 200 1", "no [time]"),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] GET / 200 1", "no quoted request"),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1", "no quoted request"),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"\\x16\\x03\" 400 0", "is not an HTTP request line"),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" OK 1", "status `OK` is not a number"),
            (b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\"", "no quoted referer"),
            (b"1.2.3.4 - - [40/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1", "day out of range"),
        ];
        for (line, want) in cases {
            let e = parse(CombinedFormat::default(), line).unwrap_err().to_string();
            assert!(e.contains(want), "{}: {e}", String::from_utf8_lossy(line));
        }
    }
}
