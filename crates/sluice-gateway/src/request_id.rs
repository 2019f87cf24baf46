//! Request ids: every request the gateway handles carries one in `X-Request-Id` — the one a
//! trusted proxy in front gave it, or a new UUIDv7 — sent to the upstream, echoed to the client,
//! and written in the access log and the decision log line, so that one request can be followed
//! through every log that saw it.
//!
//! An id from anyone else is replaced: a client would otherwise choose the id its requests are
//! logged under (one id for many requests, or another client's). An id from a trusted proxy is
//! kept only when it is 1 to 128 characters of `A-Z a-z 0-9 - _ . : + / = @`: nothing that could
//! break a log line or a header.
//!
//! ```
//! use http::HeaderMap;
//! use sluice_gateway::request_id::RequestId;
//! let mut headers = HeaderMap::new();
//! headers.insert("x-request-id", "lb-7f3a".parse().unwrap());
//! assert_eq!(RequestId::of(&headers, true).as_str(), "lb-7f3a");
//! let new = RequestId::of(&headers, false);
//! assert_eq!((new.as_str().len(), &new.as_str()[14..15]), (36, "7"), "a UUIDv7");
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};

/// `X-Request-Id`.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest id taken from a trusted proxy.
pub const MAX_LEN: usize = 128;

/// A request's id, as its header value (cloned by reference count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(HeaderValue);

impl RequestId {
    /// The id of a request with `headers`: the `X-Request-Id` a trusted peer sent (one line, of
    /// the characters allowed), else a new one.
    pub fn of(headers: &HeaderMap, peer_trusted: bool) -> Self {
        if peer_trusted {
            let mut given = headers.get_all(HEADER).iter();
            if let (Some(id), None) = (given.next(), given.next())
                && acceptable(id.as_bytes())
            {
                return Self(id.clone());
            }
        }
        Self::new()
    }

    /// A new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits; ids of one
    /// instance sort by time, and ids of several instances do not collide.
    pub fn new() -> Self {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let random: u128 = rand::random();
        let mut bits = (u128::from(ms) & 0xffff_ffff_ffff) << 80 | (random & !(0xffff_ffff_ffff_u128 << 80));
        bits = (bits & !(0xf << 76)) | (0x7 << 76); // version 7
        bits = (bits & !(0b11 << 62)) | (0b10 << 62); // the RFC's variant
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 36];
        let mut nibble = 32;
        for (i, c) in text.iter_mut().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                *c = b'-';
            } else {
                nibble -= 1;
                *c = DIGITS[((bits >> (nibble * 4)) & 0xf) as usize];
            }
        }
        // Hex digits and dashes: always a valid header value.
        Self(HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static("-")))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only allowed characters (ASCII) are ever kept.
        self.0.to_str().unwrap_or("-")
    }

    /// The id as a header value.
    pub fn header(&self) -> &HeaderValue {
        &self.0
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a proxy's id is kept: 1 to [`MAX_LEN`] characters, each a letter, a digit or one of
/// `- _ . : + / = @`.
fn acceptable(id: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&id.len()) && id.iter().all(|&b| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn new_ids_are_uuid_v7_in_time_order() {
        let a = RequestId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = RequestId::new();
        for id in [&a, &b] {
            let s = id.as_str();
            let groups: Vec<usize> = s.split('-').map(str::len).collect();
            assert_eq!(groups, [8, 4, 4, 4, 12], "{s}");
            assert_eq!(&s[14..15], "7", "version: {s}");
            assert!("89ab".contains(&s[19..20]), "variant: {s}");
        }
        assert!(a.as_str()[..13] < b.as_str()[..13], "{a:?} then {b:?}");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let stamped = u64::from_str_radix(&b.as_str()[..13].replace('-', ""), 16).unwrap();
        assert!(now - stamped < 1000, "the id's time is now");
        assert_ne!(RequestId::new(), RequestId::new());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2_000)))]

        /// Any `X-Request-Id` lines, from a trusted peer or not: kept exactly when the peer is
        /// trusted, there is one line and it is acceptable; otherwise a new UUIDv7. Never a panic.
        #[test]
        fn an_id_is_taken_only_from_a_trusted_peer_and_only_when_safe(
            lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..140), 0..3),
            trusted in any::<bool>(),
        ) {
            let mut headers = HeaderMap::new();
            for l in &lines {
                if let Ok(v) = HeaderValue::from_bytes(l) {
                    headers.append(HEADER, v);
                }
            }
            let kept: Vec<&[u8]> = headers.get_all(HEADER).iter().map(HeaderValue::as_bytes).collect();
            let id = RequestId::of(&headers, trusted);
            let safe = |b: &[u8]| !b.is_empty() && b.len() <= 128
                && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.:+/=@".contains(c));
            if trusted && kept.len() == 1 && safe(kept[0]) {
                prop_assert_eq!(id.as_str().as_bytes(), kept[0]);
            } else {
                prop_assert_eq!(id.as_str().len(), 36);
                prop_assert_eq!(&id.as_str()[14..15], "7");
            }
        }
    }
}
