//! Turning a request into limit keys: key parts, fallbacks, hashing.

use std::net::IpAddr;

use http::HeaderMap;
use sluice_config::{KeySource, KeySpec};
use sluice_store::{KeyHash, KeyHasher};

/// What a key may be built from, gathered once per request.
#[derive(Debug)]
pub struct RequestFacts<'a> {
    /// Request method.
    pub method: &'a str,
    /// Request path, without the query string.
    pub path: &'a str,
    /// The matched route's name.
    pub route: &'a str,
    /// The client address, already grouped (IPv6 prefix).
    pub client: IpAddr,
    /// Whether the socket peer is a trusted proxy (only then is the user header believed).
    pub peer_trusted: bool,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The header carrying an authenticated user id, if configured.
    pub user_header: Option<&'a str>,
    /// The body parsed as JSON, when some key part needs it and it parsed within the size bound.
    pub json: Option<&'a serde_json::Value>,
}

/// Builds the hashed key of `spec` for a request under `policy`.
///
/// Each part takes the first source of its fallback chain that is present. When none is (no
/// API key header and no fallback, an absent JSON field), the part becomes a fixed "absent"
/// marker: every request lacking it shares one key, so leaving a field out never escapes a limit.
///
/// ```
/// use sluice_config::{KeySource, KeySpec};
/// use sluice_http::keys::{key_for, RequestFacts};
/// use sluice_store::KeyHasher;
/// let spec = KeySpec { parts: vec![vec![KeySource::Header("x-api-key".into()), KeySource::Ip]] };
/// let mut headers = http::HeaderMap::new();
/// fn facts(h: &http::HeaderMap) -> RequestFacts<'_> {
///     RequestFacts { method: "GET", path: "/", route: "/", client: "192.0.2.1".parse().unwrap(),
///         peer_trusted: false, headers: h, user_header: None, json: None }
/// }
/// let hasher = KeyHasher::from_secret(b"0123456789abcdef");
/// let by_ip = key_for(&hasher, "p", &spec, &facts(&headers)).0;
/// headers.insert("x-api-key", "k1".parse().unwrap());
/// let by_key = key_for(&hasher, "p", &spec, &facts(&headers)).0;
/// assert_ne!(by_ip, by_key);
/// ```
pub fn key_for(hasher: &KeyHasher, policy: &str, spec: &KeySpec, facts: &RequestFacts<'_>) -> (KeyHash, &'static str) {
    let mut owned: Vec<(&'static str, Vec<u8>)> = Vec::with_capacity(spec.parts.len());
    let mut kind = "absent";
    for (i, chain) in spec.parts.iter().enumerate() {
        let found = chain.iter().find_map(|source| value_of(source, facts).map(|v| (source.kind(), v)));
        let (k, v) = found.unwrap_or(("absent", Vec::new()));
        if i == 0 {
            kind = k;
        }
        owned.push((k, v));
    }
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + owned.len() * 2);
    parts.push(policy.as_bytes());
    for (k, v) in &owned {
        parts.push(k.as_bytes());
        parts.push(v);
    }
    (hasher.hash(&parts), kind)
}

fn value_of(source: &KeySource, f: &RequestFacts<'_>) -> Option<Vec<u8>> {
    match source {
        KeySource::Ip => Some(match f.client {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        }),
        KeySource::Header(name) => {
            f.headers.get(name.as_str()).map(|v| v.as_bytes()).filter(|v| !v.is_empty()).map(<[u8]>::to_vec)
        }
        KeySource::User => {
            if !f.peer_trusted {
                return None;
            }
            let name = f.user_header?;
            f.headers.get(name).map(|v| v.as_bytes()).filter(|v| !v.is_empty()).map(<[u8]>::to_vec)
        }
        KeySource::Json(pointer) => {
            let value = f.json?.pointer(pointer)?;
            let text = match value {
                serde_json::Value::String(s) => s.trim().to_lowercase(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            (!text.is_empty()).then(|| text.into_bytes())
        }
        KeySource::Method => Some(f.method.as_bytes().to_vec()),
        KeySource::Path => Some(f.path.as_bytes().to_vec()),
        KeySource::Route => Some(f.route.as_bytes().to_vec()),
        KeySource::Const(c) => Some(c.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(parts: &[&[KeySource]]) -> KeySpec {
        KeySpec { parts: parts.iter().map(|p| p.to_vec()).collect() }
    }

    fn facts<'a>(h: &'a HeaderMap, json: Option<&'a serde_json::Value>, trusted: bool) -> RequestFacts<'a> {
        RequestFacts {
            method: "POST",
            path: "/api/password-reset",
            route: "reset",
            client: "192.0.2.1".parse().unwrap(),
            peer_trusted: trusted,
            headers: h,
            user_header: Some("x-user-id"),
            json,
        }
    }

    #[test]
    fn json_keys_are_trimmed_and_lower_cased_and_absent_fields_share_a_key() {
        let h = HeaderMap::new();
        let hasher = KeyHasher::from_secret(b"0123456789abcdef");
        let s = spec(&[&[KeySource::Json("/email".into())]]);
        let a = serde_json::json!({"email": "Victim@Example.com "});
        let b = serde_json::json!({"email": "victim@example.com"});
        let none = serde_json::json!({"other": 1});
        let ka = key_for(&hasher, "p", &s, &facts(&h, Some(&a), false));
        assert_eq!(ka, key_for(&hasher, "p", &s, &facts(&h, Some(&b), false)));
        assert_eq!(ka.1, "json");
        let kn = key_for(&hasher, "p", &s, &facts(&h, Some(&none), false));
        assert_eq!(kn.1, "absent");
        assert_eq!(kn, key_for(&hasher, "p", &s, &facts(&h, None, false)));
        assert_ne!(ka.0, kn.0);
    }

    #[test]
    fn user_header_is_believed_only_from_trusted_peers() {
        let mut h = HeaderMap::new();
        h.insert("x-user-id", "alice".parse().unwrap());
        let hasher = KeyHasher::from_secret(b"0123456789abcdef");
        let s = spec(&[&[KeySource::User, KeySource::Ip]]);
        assert_eq!(key_for(&hasher, "p", &s, &facts(&h, None, true)).1, "user");
        assert_eq!(key_for(&hasher, "p", &s, &facts(&h, None, false)).1, "ip");
    }

    #[test]
    fn policy_and_parts_separate_keys() {
        let h = HeaderMap::new();
        let hasher = KeyHasher::from_secret(b"0123456789abcdef");
        let ip = spec(&[&[KeySource::Ip]]);
        let ip_route = spec(&[&[KeySource::Ip], &[KeySource::Route]]);
        let f = facts(&h, None, false);
        assert_ne!(key_for(&hasher, "a", &ip, &f), key_for(&hasher, "b", &ip, &f));
        assert_ne!(key_for(&hasher, "a", &ip, &f), key_for(&hasher, "a", &ip_route, &f));
    }
}
