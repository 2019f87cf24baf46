//! Who is asking: the client address behind trusted proxies, grouped so that one IPv6 host
//! cannot multiply itself across its /64 (or larger) allocation.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;
use ipnet::IpNet;

pub use sluice_config::ForwardedHeader;

/// Resolves the client address of a request.
///
/// The socket peer is the client unless it is a trusted proxy. Then the forwarding chain (the
/// one header the proxies are configured to write) is walked from the right, skipping trusted
/// hops; the first untrusted address is the client. Entries left of it are never read: a client
/// can write anything there. A malformed entry reached before any untrusted address ends the walk
/// at the last trusted hop (the request is keyed as that proxy), so garbage can neither name
/// another client nor move the real one. IPv4-mapped IPv6 addresses are unwrapped.
///
/// ```
/// use sluice_http::identity::ClientIdentity;
/// let id = ClientIdentity::new(vec!["10.0.0.0/8".parse().unwrap()], 56);
/// let mut h = http::HeaderMap::new();
/// h.insert("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.2".parse().unwrap());
/// // The peer 10.0.0.1 and the hop 10.0.0.2 are trusted; 203.0.113.9 is the client,
/// // whatever the client wrote on the left.
/// assert_eq!(id.client_ip("10.0.0.1".parse().unwrap(), &h).to_string(), "203.0.113.9");
/// ```
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    /// Peers whose forwarding header is believed; everyone else is the client themselves.
    trusted: Vec<IpNet>,
    /// Bits of an IPv6 address that name one client: a host gets a /64 or more, so keying on
    /// the full address would let it multiply itself.
    ipv6_prefix: u8,
    /// The one header the trusted proxies write (the other is the client's to forge).
    header: ForwardedHeader,
}

/// Who sent a request, resolved once: what every key part, log line and forwarded header uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The client address, as resolved (for `X-Forwarded-For` towards the upstream).
    pub ip: IpAddr,
    /// The address as key material: IPv6 masked to the configured prefix.
    pub grouped: IpAddr,
    /// Whether the socket peer is a trusted proxy: only then are identity headers it sets
    /// (the user header) believed.
    pub peer_trusted: bool,
}

impl ClientIdentity {
    /// Trusts `trusted` proxies (writing `X-Forwarded-For`); groups IPv6 clients by
    /// `ipv6_prefix` bits.
    pub fn new(trusted: Vec<IpNet>, ipv6_prefix: u8) -> Self {
        Self { trusted, ipv6_prefix: ipv6_prefix.min(128), header: ForwardedHeader::XForwardedFor }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    pub fn with_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Resolves who sent a request from `peer` with `headers`: the client address, its key
    /// form, and whether the peer is trusted.
    ///
    /// ```
    /// use sluice_http::identity::ClientIdentity;
    /// let id = ClientIdentity::new(vec!["10.0.0.0/8".parse().unwrap()], 56);
    /// let mut h = http::HeaderMap::new();
    /// h.insert("x-forwarded-for", "2001:db8:1:2ff::7".parse().unwrap());
    /// let c = id.resolve("10.0.0.1".parse().unwrap(), &h);
    /// assert!(c.peer_trusted);
    /// assert_eq!(c.ip.to_string(), "2001:db8:1:2ff::7");
    /// assert_eq!(c.grouped.to_string(), "2001:db8:1:200::");
    /// ```
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> Client {
        if self.trusted.is_empty() {
            // Nobody is trusted (the default): the peer is the client, nothing else is read.
            let ip = unmap(peer);
            return Client { ip, grouped: self.group(ip), peer_trusted: false };
        }
        let ip = self.client_ip(peer, headers);
        Client { ip, grouped: self.group(ip), peer_trusted: self.is_trusted(peer) }
    }

    /// True when `ip` is one of the trusted proxies.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = unmap(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client address (not yet grouped).
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = unmap(peer);
        if !self.is_trusted(peer) {
            return peer;
        }
        let name = self.header.name();
        // Every entry of every line, from the right; only the entries walked are parsed, so a
        // byte that is not text (or junk) left of the client never matters.
        let mut client = peer;
        for line in headers.get_all(name).iter().rev() {
            for entry in line.as_bytes().rsplit(|&b| b == b',') {
                let hop = std::str::from_utf8(entry).ok().and_then(|text| match self.header {
                    ForwardedHeader::XForwardedFor => parse_node(text.trim()),
                    ForwardedHeader::Forwarded => forwarded_for(text),
                });
                // An entry nobody can read, reached before any untrusted address: keyed as the
                // last trusted hop.
                let Some(hop) = hop else { return client };
                client = unmap(hop);
                if !self.is_trusted(client) {
                    return client;
                }
            }
        }
        client
    }

    /// The key material for a client address: IPv4 as is, IPv6 masked to the prefix.
    pub fn group(&self, ip: IpAddr) -> IpAddr {
        match unmap(ip) {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = if self.ipv6_prefix == 0 { 0 } else { u128::MAX << (128 - self.ipv6_prefix as u32) };
                IpAddr::V6(Ipv6Addr::from(bits & mask))
            }
        }
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) to IPv4.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The `for=` node of one `Forwarded` element (RFC 7239); `None` if the element is malformed, has
/// no `for=`, or hides its node (`unknown`, `_hidden`): an address we cannot check.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut node = None;
    for pair in element.split(';') {
        let (k, v) = pair.trim().split_once('=')?;
        if k.trim().eq_ignore_ascii_case("for") {
            node = Some(parse_node(v.trim().trim_matches('"'))?);
        }
    }
    node
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:443`.
fn parse_node(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())) {
            return None;
        }
        return inside.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    fn id() -> ClientIdentity {
        ClientIdentity::new(vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()], 56)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let h = headers(&[("x-forwarded-for", "1.1.1.1"), ("forwarded", "for=2.2.2.2")]);
        assert_eq!(id().client_ip(ip("203.0.113.5"), &h), ip("203.0.113.5"));
    }

    #[test]
    fn trusted_chain_is_walked_right_to_left() {
        let h = headers(&[("x-forwarded-for", "9.9.9.9, 198.51.100.7, 10.1.1.1")]);
        assert_eq!(id().client_ip(ip("10.0.0.1"), &h), ip("198.51.100.7"));
        // Several header lines form one list.
        let h = headers(&[("x-forwarded-for", "9.9.9.9"), ("x-forwarded-for", "198.51.100.8")]);
        assert_eq!(id().client_ip(ip("10.0.0.1"), &h), ip("198.51.100.8"));
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            ("forwarded", r#"for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711""#),
        ]);
        // The default reads X-Forwarded-For: a client's own Forwarded header names nobody.
        assert_eq!(id().client_ip(ip("10.0.0.1"), &h), ip("198.51.100.1"));
        let fwd = id().with_header(ForwardedHeader::Forwarded);
        assert_eq!(fwd.client_ip(ip("10.0.0.1"), &h), ip("2001:db8:cafe::17"));
        // No header of the configured kind: the peer.
        let only_fwd = headers(&[("forwarded", "for=192.0.2.60")]);
        assert_eq!(id().client_ip(ip("10.0.0.1"), &only_fwd), ip("10.0.0.1"));
    }

    #[test]
    fn malformed_entries_before_any_client_key_the_request_as_the_proxy() {
        for bad in ["not-an-ip", "1.2.3.4, ,", "[::1", "1.2.3.4:99999", "😀", "10.1.1.1, x, 10.2.2.2"] {
            let h = headers(&[("x-forwarded-for", bad)]);
            let got = id().client_ip(ip("10.0.0.1"), &h);
            assert!(id().is_trusted(got), "{bad}: {got}");
        }
        let fwd = id().with_header(ForwardedHeader::Forwarded);
        for bad in ["for=unknown", "for=_hidden", "proto=http", "for"] {
            let h = headers(&[("forwarded", bad)]);
            assert_eq!(fwd.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"), "{bad}");
        }
    }

    #[test]
    fn garbage_left_of_the_client_is_never_read() {
        // A client that writes junk (or `unknown`) keeps its own address behind the proxy.
        for chain in ["x, 203.0.113.7", "unknown, 203.0.113.7", ",,, 203.0.113.7, 10.9.9.9"] {
            let h = headers(&[("x-forwarded-for", chain)]);
            assert_eq!(id().client_ip(ip("10.0.0.1"), &h), ip("203.0.113.7"), "{chain}");
        }
        let fwd = id().with_header(ForwardedHeader::Forwarded);
        let h = headers(&[("forwarded", "for=_hidden, garbage, for=203.0.113.7")]);
        assert_eq!(fwd.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.7"));
    }

    #[test]
    fn all_trusted_chain_ends_at_its_leftmost_hop() {
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.8.8.8")]);
        assert_eq!(id().client_ip(ip("10.0.0.1"), &h), ip("10.9.9.9"));
    }

    #[test]
    fn mapped_addresses_are_unwrapped_and_v6_grouped() {
        let i = id();
        assert_eq!(i.client_ip(ip("::ffff:10.0.0.1"), &headers(&[("x-forwarded-for", "5.5.5.5")])), ip("5.5.5.5"));
        assert_eq!(i.group(ip("2001:db8:1:2ff:aaaa::1")), ip("2001:db8:1:200::"));
        assert_eq!(i.group(ip("2001:db8:1:2ee::9")), ip("2001:db8:1:200::"));
        assert_eq!(i.group(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(ClientIdentity::new(vec![], 0).group(ip("2001:db8::1")), ip("::"));
        assert_eq!(ClientIdentity::new(vec![], 128).group(ip("2001:db8::1")), ip("2001:db8::1"));
    }

    #[test]
    fn bytes_that_are_not_text_left_of_the_client_never_matter() {
        // A client writes a non-ASCII byte on the left; the proxy appends the real address.
        for raw in [&b"\xff\xfe, 203.0.113.7"[..], b"caf\xc3\xa9, 203.0.113.7, 10.2.2.2", b"\x80"] {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", http::HeaderValue::from_bytes(raw).unwrap());
            let got = id().client_ip(ip("10.0.0.1"), &h);
            let expected = if raw == b"\x80" { ip("10.0.0.1") } else { ip("203.0.113.7") };
            assert_eq!(got, expected, "{raw:?}");
        }
        let fwd = id().with_header(ForwardedHeader::Forwarded);
        let mut h = HeaderMap::new();
        h.insert("forwarded", http::HeaderValue::from_bytes(b"for=\xff, for=203.0.113.8").unwrap());
        assert_eq!(fwd.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.8"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(4000)))]

        #[test]
        fn never_panics_on_arbitrary_headers(xff in ".{0,80}", fwd in ".{0,80}") {
            let mut h = HeaderMap::new();
            if let Ok(v) = xff.parse() { h.insert("x-forwarded-for", v); }
            if let Ok(v) = fwd.parse() { h.insert("forwarded", v); }
            let _ = id().client_ip(ip("10.0.0.1"), &h);
            let _ = id().with_header(ForwardedHeader::Forwarded).client_ip(ip("10.0.0.1"), &h);
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(lines in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60), 0..4)) {
            let mut h = HeaderMap::new();
            for l in &lines {
                if let Ok(v) = http::HeaderValue::from_bytes(l) {
                    h.append("x-forwarded-for", v.clone());
                    h.append("forwarded", v);
                }
            }
            let _ = id().client_ip(ip("10.0.0.1"), &h);
            let _ = id().with_header(ForwardedHeader::Forwarded).client_ip(ip("10.0.0.1"), &h);
        }

        #[test]
        fn the_client_is_the_first_untrusted_hop_from_the_right(
            left in proptest::collection::vec(proptest::prelude::any::<[u8; 4]>(), 0..4),
            // Any address outside the trusted 10.0.0.0/8, made so rather than filtered (a filter
            // rejects 1 case in 256, more than proptest allows over a long run).
            first in (0u8..=254).prop_map(|a| if a >= 10 { a + 1 } else { a }),
            rest in proptest::prelude::any::<[u8; 3]>(),
            hops in proptest::collection::vec(proptest::prelude::any::<[u8; 3]>(), 0..4),
        ) {
            let client = std::net::Ipv4Addr::new(first, rest[0], rest[1], rest[2]);
            proptest::prop_assert!(!id().is_trusted(IpAddr::V4(client)));
            let mut chain: Vec<String> = left.iter().map(|o| std::net::Ipv4Addr::from(*o).to_string()).collect();
            chain.push(client.to_string());
            chain.extend(hops.iter().map(|h| format!("10.{}.{}.{}", h[0], h[1], h[2])));
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", chain.join(", ").parse().unwrap());
            proptest::prop_assert_eq!(id().client_ip(ip("10.0.0.1"), &h), IpAddr::V4(client));
        }
    }
}

/// The client certificate a TLS handshake verified, as `tls:` key parts read it: put in a
/// request's extensions by the server that terminated TLS (sluice's gateway, with
/// `[server.tls] client_ca`), and absent otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The subject alternative names (DNS, then URI), joined by `,`.
    san: std::sync::Arc<str>,
    /// The subject, DER as the certificate encodes it.
    subject: std::sync::Arc<[u8]>,
}

impl PeerCertificate {
    /// A certificate naming `san` (DNS and URI names) with the DER subject `subject`.
    pub fn new<'a>(san: impl IntoIterator<Item = &'a str>, subject: &[u8]) -> Self {
        let san: Vec<&str> = san.into_iter().collect();
        Self { san: san.join(",").into(), subject: subject.into() }
    }

    /// Its subject alternative names, joined by `,`; `None` when it has none.
    pub fn san(&self) -> Option<&str> {
        Some(&*self.san).filter(|s| !s.is_empty())
    }

    /// Its subject (DER).
    pub fn subject(&self) -> &[u8] {
        &self.subject
    }
}
