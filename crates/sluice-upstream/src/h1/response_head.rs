//! The head of an upstream's response: parsed, checked, and how its body is framed.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::{Method, StatusCode};

use crate::hop_by_hop::is_hop_by_hop;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// A response head of this many bytes or more is a 502.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most fields a response head may have; more is a 502.
pub const MAX_FIELDS: usize = 128;

/// Room left in a response's field map for the fields the proxy adds (the rate-limit headers),
/// so that adding them does not grow the map.
const ADDED_FIELDS: usize = 8;

/// How a response's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: the response to a `HEAD`, a `204` or `304`, or a `Content-Length: 0`.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither length nor chunks: the body ends when the upstream closes the connection.
    UntilClose,
}

/// A final response head.
#[derive(Debug)]
pub struct Head {
    /// Its status, never `1xx`.
    pub status: StatusCode,
    /// Its end-to-end fields as they came, in order: the hop-by-hop ones
    /// ([`crate::hop_by_hop::is_hop_by_hop`]) and those its `Connection` field names are left out,
    /// as a proxy never passes them on (RFC 9110 §7.6.1).
    pub headers: HeaderMap,
    /// How its body ends.
    pub framing: Framing,
    /// Whether the connection may carry another exchange once this body has ended: HTTP/1.1 (or
    /// HTTP/1.0 with `Connection: keep-alive`), no `Connection: close`, a body that ends by its
    /// framing rather than by the close.
    pub reusable: bool,
}

/// What the start of a buffer holds.
#[derive(Debug)]
pub enum Parsed {
    /// Not a whole head yet: read more.
    Partial,
    /// A `1xx` interim response, taken off the buffer: the final one follows.
    Interim,
    /// The final head, taken off the buffer: the body follows.
    Final(Head),
}

/// Why a response head is refused (the client gets a 502 and the connection is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Not an HTTP/1.x response head, or a field that is not one.
    #[error("the upstream's response head is malformed")]
    Malformed,
    /// Over [`MAX_HEAD`] bytes or [`MAX_FIELDS`] fields.
    #[error("the upstream's response head is larger than {MAX_HEAD} bytes or {MAX_FIELDS} fields")]
    TooLarge,
    /// A `Content-Length` that is not one decimal number.
    #[error("the upstream's response has an invalid Content-Length")]
    BadLength,
    /// A `Transfer-Encoding` other than `chunked`, or one beside a `Content-Length`: the body
    /// could be read two ways.
    #[error("the upstream's response is framed ambiguously")]
    Ambiguous,
    /// `101 Switching Protocols` (sluice never asks for an upgrade: it strips `Upgrade`), or a
    /// `2xx` to a `CONNECT` (a tunnel).
    #[error("the upstream switched protocols or opened a tunnel")]
    Upgrade,
}

/// Parses the response head at the start of `buf` and, when it is whole, takes it off `buf`.
/// `method`: the request's (the response to a `HEAD` has no body, whatever its fields say; a
/// `2xx` to a `CONNECT` would open a tunnel, which sluice does not run).
///
/// ```
/// use sluice_upstream::h1::response_head::{parse, Framing, Parsed};
/// let mut buf = bytes::BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1"[..]);
/// let Ok(Parsed::Final(head)) = parse(&mut buf, &http::Method::GET) else { panic!() };
/// assert_eq!((head.status.as_u16(), head.framing, head.reusable), (200, Framing::Length(2), true));
/// assert_eq!(&buf[..], b"okHTTP/1.1", "the body and what follows stay in the buffer");
/// ```
pub fn parse(buf: &mut BytesMut, method: &Method) -> Result<Parsed, HeadError> {
    // Where each field's name and value lie in the buffer: the parser's slices borrow it, and
    // the head is taken off it (to share its bytes with the values) only once they are gone.
    // Offsets fit in 16 bits: a head is at most `MAX_HEAD` bytes.
    let mut spans = [(0u16, 0u16, 0u16, 0u16); MAX_FIELDS];
    let (len, code, minor, count) = {
        // Filled by the parser as it goes: nothing to initialise for fields a head does not have.
        let mut fields = [const { MaybeUninit::uninit() }; MAX_FIELDS];
        let mut res = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, buf, &mut fields)
        {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(HeadError::TooLarge),
            Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        };
        if len >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let (Some(code), Some(minor)) = (res.code, res.version) else { return Err(HeadError::Malformed) };
        let base = buf.as_ptr() as usize;
        // Within the head's first `len` bytes, so below `MAX_HEAD`.
        let at = |s: &[u8]| (s.as_ptr() as usize - base) as u16;
        for (span, f) in spans.iter_mut().zip(res.headers.iter()) {
            *span = (at(f.name.as_bytes()), f.name.len() as u16, at(f.value), f.value.len() as u16);
        }
        (len, code, minor, res.headers.len())
    };
    let head = buf.split_to(len).freeze();
    let spans = &spans[..count];
    let field = |&(n, nl, v, vl): &(u16, u16, u16, u16)| {
        let (n, nl, v, vl) = (usize::from(n), usize::from(nl), usize::from(v), usize::from(vl));
        (&head[n..n + nl], &head[v..v + vl])
    };
    if (100..200).contains(&code) {
        return if code == 101 { Err(HeadError::Upgrade) } else { Ok(Parsed::Interim) };
    }
    let status = StatusCode::from_u16(code).map_err(|_| HeadError::Malformed)?;
    if method == Method::CONNECT && status.is_success() {
        return Err(HeadError::Upgrade);
    }
    let head_request = method == Method::HEAD;

    let (mut length, mut has_length, mut chunked, mut has_coding) = (None, false, false, false);
    // More than one Content-Length item (repeated lines, or a list): passed on as one value.
    let mut length_items = 0;
    let (mut close, mut keep_alive) = (false, false);
    // The names `Connection` lists besides its options: hop-by-hop too (rarely any).
    let mut listed: Vec<HeaderName> = Vec::new();
    for (name, value) in spans.iter().map(field) {
        if name.eq_ignore_ascii_case(b"content-length") {
            has_length = true;
            for item in list_items(value) {
                length_items += 1;
                let n = decimal(item).ok_or(HeadError::BadLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(HeadError::BadLength);
                }
                length = Some(n);
            }
            if length.is_none() {
                return Err(HeadError::BadLength);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            has_coding = true;
            for coding in list_items(value) {
                // Only `chunked`, once: another coding would reach the client still encoded
                // once the hop-by-hop `Transfer-Encoding` is stripped.
                if !coding.eq_ignore_ascii_case(b"chunked") || chunked {
                    return Err(HeadError::Ambiguous);
                }
                chunked = true;
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in list_items(value) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                } else if let Ok(name) = HeaderName::from_bytes(token) {
                    listed.push(name);
                }
            }
        }
    }
    // An HTTP/1.0 message with a Transfer-Encoding is misframed (RFC 9112 §6.1).
    if has_coding && (has_length || !chunked || minor == 0) {
        return Err(HeadError::Ambiguous);
    }
    let framing = match length {
        _ if head_request || code == 204 || code == 304 => Framing::Empty,
        _ if chunked => Framing::Chunked,
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    };

    let mut headers = HeaderMap::with_capacity(count + ADDED_FIELDS);
    for span in spans {
        let (name, _) = field(span);
        if is_hop_by_hop(name) {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| HeadError::Malformed)?;
        let (at, len) = (usize::from(span.2), usize::from(span.3));
        let value = head.slice(at..at + len);
        headers.append(name, HeaderValue::from_maybe_shared(value).map_err(|_| HeadError::Malformed)?);
    }
    // `close` names a field too (RFC 9110 §7.6.1).
    if close {
        listed.push(HeaderName::from_static("close"));
    }
    for name in &listed {
        headers.remove(name);
    }
    // `7, 7` is one length to sluice but not to every client: the client gets `7`.
    if let Some(n) = length
        && length_items > 1
        && headers.contains_key(http::header::CONTENT_LENGTH)
    {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    // HTTP/1.1 keeps a connection unless told otherwise; HTTP/1.0 only when told to.
    let reusable = (minor == 1 || keep_alive) && !close && framing != Framing::UntilClose;
    Ok(Parsed::Final(Head { status, headers, framing, reusable }))
}

/// The items of a comma-separated field value, trimmed, empty ones left out (RFC 9110 §5.6.1).
fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|i| !i.is_empty())
}

/// A `Content-Length` item: decimal digits only, no sign, within `u64`.
fn decimal(item: &[u8]) -> Option<u64> {
    if item.is_empty() {
        return None;
    }
    item.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str, head_request: bool) -> Result<Parsed, HeadError> {
        let method = if head_request { Method::HEAD } else { Method::GET };
        parse(&mut BytesMut::from(head.as_bytes()), &method)
    }

    fn framing(head: &str) -> Result<(Framing, bool), HeadError> {
        match parsed(head, false)? {
            Parsed::Final(h) => Ok((h.framing, h.reusable)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_framing_follows_rfc_9112() {
        use Framing::*;
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n"), Ok((Length(12), true)));
        assert_eq!(framing("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), Ok((Empty, true)));
        assert_eq!(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"), Ok((Chunked, true)));
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), Ok((UntilClose, false)));
        assert_eq!(framing("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"), Ok((Empty, true)));
        assert_eq!(framing("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"), Ok((Empty, true)));
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive, Close\r\n\r\n"),
            Ok((Length(3), false))
        );
        assert_eq!(framing("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n"), Ok((Length(3), false)));
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: Keep-Alive\r\n\r\n"),
            Ok((Length(3), true))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n"),
            Ok((Length(7), true))
        );
        match parsed("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n", false) {
            Ok(Parsed::Final(h)) => {
                let lengths: Vec<_> = h.headers.get_all("content-length").iter().collect();
                assert_eq!(lengths, ["7"], "passed on as one value");
            }
            other => panic!("{other:?}"),
        }
        match parsed("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true) {
            Ok(Parsed::Final(h)) => assert_eq!(h.framing, Empty, "the response to a HEAD has no body"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_body_that_could_be_read_two_ways_is_refused() {
        for head in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
        ] {
            assert_eq!(framing(head).unwrap_err(), HeadError::Ambiguous, "{head:?}");
        }
        for head in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        ] {
            assert_eq!(framing(head).unwrap_err(), HeadError::BadLength, "{head:?}");
        }
    }

    #[test]
    fn interim_responses_are_skipped_and_an_upgrade_refused() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..]);
        assert!(matches!(parse(&mut buf, &Method::GET), Ok(Parsed::Interim)));
        assert!(matches!(parse(&mut buf, &Method::GET), Ok(Parsed::Interim)));
        assert!(matches!(parse(&mut buf, &Method::GET), Ok(Parsed::Final(h)) if h.status == 200));
        assert!(buf.is_empty());
        let tunnel = "HTTP/1.1 200 Connection Established\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse(&mut BytesMut::from(tunnel), &Method::CONNECT).unwrap_err(), HeadError::Upgrade, "no tunnel");
        let refused = "HTTP/1.1 405 No\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(parse(&mut BytesMut::from(refused), &Method::CONNECT), Ok(Parsed::Final(_))));
        assert_eq!(
            parsed("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", false).unwrap_err(),
            HeadError::Upgrade
        );
    }

    #[test]
    fn a_head_is_read_whole_within_its_bounds() {
        let whole = "HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 0\r\n\r\n";
        for cut in 0..whole.len() {
            assert!(matches!(parsed(&whole[..cut], false), Ok(Parsed::Partial)), "cut at {cut}");
        }
        let long = format!("HTTP/1.1 200 OK\r\nX-Big: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parsed(&long, false).unwrap_err(), HeadError::TooLarge, "never ending");
        let many: String = (0..=MAX_FIELDS).map(|i| format!("X-{i}: 1\r\n")).collect();
        assert_eq!(parsed(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"), false).unwrap_err(), HeadError::TooLarge);
        let most: String = (0..MAX_FIELDS).map(|i| format!("X-{i}: 1\r\n")).collect();
        assert!(
            matches!(parsed(&format!("HTTP/1.1 200 OK\r\n{most}\r\n"), false), Ok(Parsed::Final(h)) if h.headers.len() == MAX_FIELDS)
        );
    }

    #[test]
    fn malformed_heads_are_refused() {
        for head in [
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nName : x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
            "<html>\r\n\r\n",
        ] {
            assert!(parsed(head, false).is_err(), "{head:?}");
        }
    }

    #[test]
    fn fields_keep_their_order_and_repetitions() {
        let Ok(Parsed::Final(h)) = parsed(
            "HTTP/1.1 404 Nope\r\nSet-Cookie: a=1\r\nX-Y: z\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n",
            false,
        ) else {
            panic!()
        };
        assert_eq!(h.status, 404);
        let cookies: Vec<_> = h.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(h.headers["x-y"], "z");
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_left_out() {
        let Ok(Parsed::Final(h)) = parsed(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Authorization: Basic x\r\nX-End: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        ) else {
            panic!()
        };
        assert_eq!(h.framing, Framing::Chunked, "framed before the fields are left out");
        assert_eq!(h.headers.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["x-end"]);
        let Ok(Parsed::Final(h)) =
            parsed("HTTP/1.1 200 OK\r\nConnection: close\r\nClose: x\r\nContent-Length: 0\r\n\r\n", false)
        else {
            panic!()
        };
        assert!(!h.reusable && h.headers.get("close").is_none());
        assert_eq!(h.headers["content-length"], "0", "end-to-end: kept");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

        /// Bytes from the network: never a panic, and a head accepted is one the buffer held,
        /// with a framing its fields state once.
        #[test]
        fn any_bytes_are_parsed_or_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), head_request: bool) {
            let mut buf = BytesMut::from(&bytes[..]);
            let method = if head_request { Method::HEAD } else { Method::GET };
            if let Ok(Parsed::Final(h)) = parse(&mut buf, &method) {
                proptest::prop_assert!(!(100..200).contains(&h.status.as_u16()));
                proptest::prop_assert!(h.headers.keys().all(|n| !is_hop_by_hop(n.as_str().as_bytes())));
                proptest::prop_assert!(buf.len() < bytes.len());
            }
        }

        /// Heads made of plausible pieces (the fields that frame a body among others): whatever
        /// the mix, a Content-Length and a Transfer-Encoding never both frame it.
        #[test]
        fn framing_fields_in_any_mix_frame_once(fields in proptest::collection::vec(proptest::sample::select(vec![
            "Content-Length: 5", "Content-Length: 6", "content-length:5", "Transfer-Encoding: chunked",
            "transfer-encoding: CHUNKED", "Transfer-Encoding: identity", "Connection: close", "X-A: b",
            "Content-Length: 5,5", "Transfer-Encoding: , chunked",
        ]), 0..6), code in proptest::sample::select(vec![200u16, 204, 304, 100, 404])) {
            let head = format!("HTTP/1.1 {code} X\r\n{}\r\n", fields.iter().map(|f| format!("{f}\r\n")).collect::<String>());
            let lengths: std::collections::BTreeSet<&str> = fields.iter().filter(|f| f.to_ascii_lowercase().starts_with("content-length"))
                .map(|f| f.rsplit(':').next().unwrap().split(',').next().unwrap().trim()).collect();
            let codings = fields.iter().filter(|f| f.to_ascii_lowercase().starts_with("transfer-encoding")).count();
            match parsed(&head, false) {
                Ok(Parsed::Final(h)) => {
                    proptest::prop_assert!(codings == 0 || lengths.is_empty(), "{head:?}");
                    proptest::prop_assert!(lengths.len() <= 1, "{head:?}");
                    if code != 204 && code != 304 && codings == 0 {
                        let want = lengths.iter().next().map_or(Framing::UntilClose, |l| Framing::Length(l.parse().unwrap()));
                        proptest::prop_assert_eq!(h.framing, want);
                    }
                }
                Ok(Parsed::Interim) => proptest::prop_assert_eq!(code, 100),
                Ok(Parsed::Partial) => proptest::prop_assert!(false, "a whole head is not partial"),
                Err(_) => proptest::prop_assert!(codings > 0 || lengths.len() > 1, "{head:?}"),
            }
        }
    }
}
