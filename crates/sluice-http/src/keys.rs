//! Turning a request into limit keys: key parts, fallbacks, keyed hashing.

use std::borrow::Cow;
use std::net::IpAddr;

use http::HeaderMap;
use sluice_config::{KeySource, KeySpec};
use sluice_store::{KeyHash, KeyHasher};

use crate::identity::Client;

/// What a key may be built from, gathered once per request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// Request method.
    pub method: &'a str,
    /// Request path, normalised (`sluice_config::normalize_path`), without the query string.
    pub path: &'a str,
    /// The matched route's name.
    pub route: &'a str,
    /// Who sent it (resolved once, see [`crate::identity::ClientIdentity::resolve`]).
    pub client: &'a Client,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The body parsed as JSON, when some key part needs it and it could be keyed
    /// (see [`crate::body_key`]).
    pub json: Option<&'a serde_json::Value>,
}

/// The kind of key a limit was decided on, for logs: the source that the first part of its key
/// took (`ip`, `header`, `json`, ...), `absent` when no source of that part was present, `api`
/// for keys named in the decision API.
pub type KeyKind = &'static str;

/// Builds keys: the keyed hash of the parts a request supplies. Raw identities (addresses,
/// emails, API keys) go no further than this.
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    /// The keyed 128-bit hash; instances sharing a store share its secret.
    hasher: KeyHasher,
    /// The header carrying an authenticated user id (lower case), believed only from trusted
    /// peers.
    user_header: Option<String>,
}

impl KeyBuilder {
    /// Keys hashed with `hasher`; the `user` part reads `user_header` (from trusted peers only).
    pub fn new(hasher: KeyHasher, user_header: Option<String>) -> Self {
        Self { hasher, user_header: user_header.map(|h| h.to_ascii_lowercase()) }
    }

    /// The key hasher.
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// Builds the hashed key of `spec` for a request under `policy`, and its [`KeyKind`].
    ///
    /// Each part takes the first source of its fallback chain that is present. When none is (no
    /// API key header and no fallback, an absent JSON field), the part becomes a fixed "absent"
    /// marker: every request lacking it shares one key, so leaving a field out never escapes a
    /// limit.
    ///
    /// ```
    /// use sluice_config::{KeySource, KeySpec};
    /// use sluice_http::identity::Client;
    /// use sluice_http::keys::{KeyBuilder, RequestFacts};
    /// use sluice_store::KeyHasher;
    /// let spec = KeySpec { parts: vec![vec![KeySource::Header("x-api-key".into()), KeySource::Ip]] };
    /// let ip = "192.0.2.1".parse().unwrap();
    /// let client = Client { ip, grouped: ip, peer_trusted: false };
    /// let keys = KeyBuilder::new(KeyHasher::from_secret(b"0123456789abcdef"), None);
    /// let key = |headers: &http::HeaderMap| {
    ///     let facts = RequestFacts { method: "GET", path: "/", route: "/", client: &client, headers, json: None };
    ///     keys.key("p", &spec, &facts)
    /// };
    /// let mut headers = http::HeaderMap::new();
    /// let (by_ip, kind) = key(&headers);
    /// assert_eq!(kind, "ip");
    /// headers.insert("x-api-key", "k1".parse().unwrap());
    /// let (by_key, kind) = key(&headers);
    /// assert_eq!(kind, "header");
    /// assert_ne!(by_ip, by_key);
    /// ```
    pub fn key(&self, policy: &str, spec: &KeySpec, facts: &RequestFacts<'_>) -> (KeyHash, KeyKind) {
        let mut found: Vec<(KeyKind, Cow<'_, [u8]>)> = Vec::with_capacity(spec.parts.len());
        for chain in &spec.parts {
            let part = chain.iter().find_map(|source| self.value_of(source, facts).map(|v| (source.kind(), v)));
            found.push(part.unwrap_or(("absent", Cow::Borrowed(&[]))));
        }
        let kind = found.first().map_or("absent", |(k, _)| *k);
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + found.len() * 2);
        parts.push(policy.as_bytes());
        for (k, v) in &found {
            parts.push(k.as_bytes());
            parts.push(v);
        }
        (self.hasher.hash(&parts), kind)
    }

    /// The key of a decision API check: the caller names the key itself, so it is hashed apart
    /// from every request key (a named key can never land in a request's bucket).
    pub fn named(&self, policy: &str, key: &str) -> KeyHash {
        self.hasher.hash(&[policy.as_bytes(), b"api", key.as_bytes()])
    }

    fn value_of<'a>(&self, source: &'a KeySource, f: &RequestFacts<'a>) -> Option<Cow<'a, [u8]>> {
        let header =
            |name: &str| f.headers.get(name).map(|v| v.as_bytes()).filter(|v| !v.is_empty()).map(Cow::Borrowed);
        match source {
            KeySource::Ip => Some(Cow::Owned(match f.client.grouped {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            })),
            KeySource::Header(name) => header(name),
            KeySource::User => {
                if !f.client.peer_trusted {
                    return None;
                }
                header(self.user_header.as_deref()?)
            }
            KeySource::Json(pointer) => {
                let value = f.json?.pointer(pointer)?;
                let text = match value {
                    serde_json::Value::String(s) => s.trim().to_lowercase(),
                    serde_json::Value::Number(n) => n.to_string(),
                    serde_json::Value::Bool(b) => b.to_string(),
                    _ => return None,
                };
                (!text.is_empty()).then(|| Cow::Owned(text.into_bytes()))
            }
            KeySource::Method => Some(Cow::Borrowed(f.method.as_bytes())),
            KeySource::Path => Some(Cow::Borrowed(f.path.as_bytes())),
            KeySource::Route => Some(Cow::Borrowed(f.route.as_bytes())),
            KeySource::Const(c) => Some(Cow::Borrowed(c.as_bytes())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(parts: &[&[KeySource]]) -> KeySpec {
        KeySpec { parts: parts.iter().map(|p| p.to_vec()).collect() }
    }

    fn client(trusted: bool) -> Client {
        let ip = "192.0.2.1".parse().unwrap();
        Client { ip, grouped: ip, peer_trusted: trusted }
    }

    fn facts<'a>(h: &'a HeaderMap, json: Option<&'a serde_json::Value>, client: &'a Client) -> RequestFacts<'a> {
        RequestFacts { method: "POST", path: "/api/password-reset", route: "reset", client, headers: h, json }
    }

    fn keys() -> KeyBuilder {
        KeyBuilder::new(KeyHasher::from_secret(b"0123456789abcdef"), Some("X-User-Id".into()))
    }

    #[test]
    fn json_keys_are_trimmed_and_lower_cased_and_absent_fields_share_a_key() {
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Json("/email".into())]]);
        let a = serde_json::json!({"email": "Victim@Example.com "});
        let b = serde_json::json!({"email": "victim@example.com"});
        let none = serde_json::json!({"other": 1});
        let ka = keys().key("p", &s, &facts(&h, Some(&a), &c));
        assert_eq!(ka, keys().key("p", &s, &facts(&h, Some(&b), &c)));
        assert_eq!(ka.1, "json");
        let kn = keys().key("p", &s, &facts(&h, Some(&none), &c));
        assert_eq!(kn.1, "absent");
        assert_eq!(kn, keys().key("p", &s, &facts(&h, None, &c)));
        assert_ne!(ka.0, kn.0);
    }

    #[test]
    fn user_header_is_believed_only_from_trusted_peers() {
        let mut h = HeaderMap::new();
        h.insert("x-user-id", "alice".parse().unwrap());
        let s = spec(&[&[KeySource::User, KeySource::Ip]]);
        assert_eq!(keys().key("p", &s, &facts(&h, None, &client(true))).1, "user");
        assert_eq!(keys().key("p", &s, &facts(&h, None, &client(false))).1, "ip");
    }

    #[test]
    fn policy_and_parts_separate_keys() {
        let h = HeaderMap::new();
        let c = client(false);
        let ip = spec(&[&[KeySource::Ip]]);
        let ip_route = spec(&[&[KeySource::Ip], &[KeySource::Route]]);
        let f = facts(&h, None, &c);
        assert_ne!(keys().key("a", &ip, &f), keys().key("b", &ip, &f));
        assert_ne!(keys().key("a", &ip, &f), keys().key("a", &ip_route, &f));
    }

    #[test]
    fn named_keys_never_meet_request_keys() {
        // A decision API caller naming the raw bytes a request key would hash cannot reach it.
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Const("global".into())]]);
        let request = keys().key("p", &s, &facts(&h, None, &c)).0;
        assert_ne!(request, keys().named("p", "global"));
        assert_ne!(request, keys().named("p", "constglobal"));
    }
}
