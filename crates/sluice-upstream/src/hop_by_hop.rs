//! The hop-by-hop rules: the fields a proxy never passes on (RFC 9110 §7.6.1), one definition
//! for the request the proxy forwards and the response heads it reads.

use http::header::{self, HeaderMap, HeaderName};

/// The headers a proxy never passes on: the hop-by-hop ones (RFC 9110 §7.6.1, and the
/// `Keep-Alive` and `Proxy-Connection` of older peers), `HTTP2-Settings` (RFC 9113 §3.2.1: part
/// of an `Upgrade: h2c`, never passed on whatever `Connection` lists) and `Proxy-Authorization`.
const STRIPPED_COUNT: usize = 9;
static STRIPPED: [HeaderName; STRIPPED_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("http2-settings"),
];

/// The place of `name` in [`STRIPPED`], if it is one of them.
fn stripped_index(name: &HeaderName) -> Option<usize> {
    stripped_index_of(name.as_str().as_bytes())
}

/// True when a field named `name` (in any case) is never passed on by a proxy: one of
/// [`STRIPPED`]. The fields a `Connection` header names are not known here.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    stripped_index_of(name).is_some()
}

/// The place in [`STRIPPED`] of the name `name` spells in any case: a comparison of its length,
/// then of at most two names. Must list [`STRIPPED`] in its order (a test checks).
fn stripped_index_of(name: &[u8]) -> Option<usize> {
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    match name.len() {
        10 if is("connection") => Some(0),
        10 if is("keep-alive") => Some(1),
        16 if is("proxy-connection") => Some(2),
        2 if is("te") => Some(3),
        7 if is("trailer") => Some(4),
        17 if is("transfer-encoding") => Some(5),
        7 if is("upgrade") => Some(6),
        19 if is("proxy-authorization") => Some(7),
        14 if is("http2-settings") => Some(8),
        _ => None,
    }
}

/// Removes hop-by-hop headers, including those the `Connection` header lists, and
/// `Proxy-Authorization`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names, which compares, instead of a hashed removal per stripped name:
    // most messages hold one of them at most (a response's `Connection: keep-alive`).
    let mut present = [false; STRIPPED_COUNT];
    let mut any = false;
    for name in headers.keys() {
        if let Some(i) = stripped_index(name) {
            present[i] = true;
            any = true;
        }
    }
    if !any {
        return;
    }
    // `keep-alive` names a header stripped anyway: the usual `Connection` value allocates
    // nothing. (`close` is an option, but a header of that name must go too, RFC 9110 §7.6.1.)
    let only_keep_alive =
        || headers.get_all(header::CONNECTION).iter().all(|v| v.as_bytes().eq_ignore_ascii_case(b"keep-alive"));
    let listed: Vec<HeaderName> = if present[0] && !only_keep_alive() {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|t| !t.eq_ignore_ascii_case("keep-alive"))
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
            .collect()
    } else {
        Vec::new()
    };
    for (name, _) in STRIPPED.iter().zip(present).filter(|(_, p)| *p) {
        headers.remove(name);
    }
    for name in &listed {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_without_hop_by_hop_headers_is_left_as_it_is() {
        let mut h = HeaderMap::new();
        h.insert("x-keep", "1".parse().unwrap());
        h.append("x-keep", "2".parse().unwrap());
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
        h.insert(header::PROXY_AUTHORIZATION, "Basic x".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before, "Proxy-Authorization and Keep-Alive go, alone too");
    }

    #[test]
    fn hop_by_hop_headers_and_listed_ones_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret-hop".parse().unwrap());
        h.append(header::CONNECTION, "Close,X-Other-Hop".parse().unwrap());
        h.insert("x-other-hop", "1".parse().unwrap());
        h.insert("close", "x".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret-hop").is_none() && h.get("x-other-hop").is_none());
        assert!(h.get("keep-alive").is_none() && h.get("close").is_none(), "Connection: close names it");
        assert!(h.get(header::TRANSFER_ENCODING).is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h["x-keep"], "1");
    }

    #[test]
    fn stripped_index_names_the_stripped_list_in_order() {
        for (i, name) in STRIPPED.iter().enumerate() {
            assert_eq!(stripped_index(name), Some(i), "{name}");
            assert!(is_hop_by_hop(name.as_str().to_ascii_uppercase().as_bytes()), "{name} in any case");
        }
        assert!(!is_hop_by_hop(b"connections") && !is_hop_by_hop(b"t") && !is_hop_by_hop(b"upgrades"));
        assert_eq!(stripped_index(&HeaderName::from_static("content-type")), None);
        assert_eq!(STRIPPED[0], header::CONNECTION, "strip_hop_by_hop reads present[0] as Connection");
    }
}
