//! Turning a request into limit keys: key parts, fallbacks, keyed hashing.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderMap;
use sluice_config::{KeySource, KeySpec, PlanChoice, TlsName};
use sluice_store::{KeyHash, KeyHasher};

use crate::account::account_key;
use crate::body_key::KeyedBody;
use crate::identity::Client;
use crate::jwt::{JwtVerifier, TokenMemo, TokenStatus};

/// Why a request's key cannot be built: it would let the client choose its bucket. Answered
/// with 400 (an invalid token with 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefusal {
    /// A header that a key is built from came in several lines: a front proxy that appends
    /// would let the client pick which one counts.
    #[error("The header `{0}` may appear once.")]
    RepeatedHeader(String),
    /// A header that a key is built from has a byte outside printable ASCII (a tab, a control,
    /// a non-ASCII byte such as `\xa0`): applications that strip Unicode whitespace or decode
    /// the value another way would read another key.
    #[error("The header `{0}` must be printable ASCII.")]
    HeaderValue(String),
    /// The request also sends a header that a key is built from under another spelling, with
    /// `_` for `-` (`X_Api_Key` for `X-Api-Key`): WSGI and CGI applications read both as one.
    #[error("The header `{0}` is also sent spelled with `_`.")]
    OtherSpelling(String),
    /// The request's bearer token does not verify, and `[identity.jwt] on_invalid_token` is
    /// `"reject"`.
    #[error("The bearer token is invalid or expired.")]
    InvalidToken,
    /// The request names its host twice, differently: HTTP/2's `:authority` (or an HTTP/1.1
    /// target in absolute form) and a `Host` header, or `Host` on several lines. Applications
    /// pick one or the other (Go's net/http the target, most frameworks `Host`), so one request
    /// would be two hosts' business.
    #[error("The request's host is named twice, differently (its target and `Host`), or has user info.")]
    Authority,
}

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
    /// The client certificate the connection's TLS handshake verified (`tls:` parts), if any.
    pub tls: Option<&'a crate::identity::PeerCertificate>,
    /// The body parsed for `json:` or `form:` parts, when some key part needs it and it could
    /// be keyed (see [`crate::body_key`]).
    pub body: Option<&'a KeyedBody>,
}

/// The kind of key a limit was decided on, for logs: the source that the first part of its key
/// took (`ip`, `header`, `json`, ...), `absent` when no source of that part was present, `api`
/// for keys named in the decision API.
pub type KeyKind = &'static str;

/// A part of a key as a request gives it: its kind and its bytes.
type KeyPart<'a> = (KeyKind, Cow<'a, [u8]>);

/// Builds keys: the keyed hash of the parts a request supplies. Raw identities (addresses,
/// emails, API keys) go no further than this.
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    /// The keyed 128-bit hash; instances sharing a store share its secret.
    hasher: KeyHasher,
    /// The header carrying an authenticated user id (lower case), believed only from trusted
    /// peers.
    user_header: Option<String>,
    /// Verifies bearer tokens for `jwt:` parts; without it they are always absent.
    jwt: Option<Arc<JwtVerifier>>,
}

impl KeyBuilder {
    /// Keys hashed with `hasher`; the `user` part reads `user_header` (from trusted peers only).
    pub fn new(hasher: KeyHasher, user_header: Option<String>) -> Self {
        Self { hasher, user_header: user_header.map(|h| h.to_ascii_lowercase()), jwt: None }
    }

    /// The same builder, reading `jwt:` parts from tokens that `verifier` verifies.
    pub fn with_jwt(self, verifier: Option<Arc<JwtVerifier>>) -> Self {
        Self { jwt: verifier, ..self }
    }

    /// The token verifier, if `[identity.jwt]` is configured.
    pub fn jwt(&self) -> Option<&Arc<JwtVerifier>> {
        self.jwt.as_ref()
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
    ///     let facts = RequestFacts { method: "GET", path: "/", route: "/", client: &client, headers, tls: None, body: None };
    ///     keys.key("p", &spec, &facts)
    /// };
    /// let mut headers = http::HeaderMap::new();
    /// let (by_ip, kind) = key(&headers).unwrap();
    /// assert_eq!(kind, "ip");
    /// headers.insert("x-api-key", "k1".parse().unwrap());
    /// let (by_key, kind) = key(&headers).unwrap();
    /// assert_eq!(kind, "header");
    /// assert_ne!(by_ip, by_key);
    /// headers.append("x-api-key", "k2".parse().unwrap());
    /// assert!(key(&headers).is_err(), "two lines of a keyed header: the client would choose");
    /// ```
    pub fn key(
        &self,
        policy: &str,
        spec: &KeySpec,
        facts: &RequestFacts<'_>,
    ) -> Result<(KeyHash, KeyKind), KeyRefusal> {
        self.key_in(policy, spec, facts, &TokenMemo::default())
    }

    /// [`KeyBuilder::key`] for one of a request's limits: `memo` keeps the request's token
    /// verdict, so several limits verify its token once.
    pub fn key_in(
        &self,
        policy: &str,
        spec: &KeySpec,
        facts: &RequestFacts<'_>,
        memo: &TokenMemo,
    ) -> Result<(KeyHash, KeyKind), KeyRefusal> {
        // The address as key material, borrowed from here by an `ip` part (not allocated).
        let (v4, v6);
        let ip: &[u8] = match facts.client.grouped {
            IpAddr::V4(a) => {
                v4 = a.octets();
                &v4
            }
            IpAddr::V6(a) => {
                v6 = a.octets();
                &v6
            }
        };
        let absent = || ("absent", Cow::Borrowed(&[][..]));
        let n = spec.parts.len();
        // Keys of up to three parts (nearly all) are gathered and hashed on the stack.
        const INLINE: usize = 3;
        if n <= INLINE {
            let mut found: [KeyPart<'_>; INLINE] = std::array::from_fn(|_| absent());
            for (slot, chain) in found.iter_mut().zip(&spec.parts) {
                if let Some(part) = self.first_of(chain, facts, memo, ip)? {
                    *slot = part;
                }
            }
            let mut parts: [&[u8]; 1 + 2 * INLINE] = [&[]; 1 + 2 * INLINE];
            parts[0] = policy.as_bytes();
            for (i, (k, v)) in found[..n].iter().enumerate() {
                parts[1 + 2 * i] = k.as_bytes();
                parts[2 + 2 * i] = v;
            }
            let kind = if n == 0 { "absent" } else { found[0].0 };
            return Ok((self.hasher.hash(&parts[..1 + 2 * n]), kind));
        }
        let mut found: Vec<KeyPart<'_>> = Vec::with_capacity(n);
        for chain in &spec.parts {
            found.push(self.first_of(chain, facts, memo, ip)?.unwrap_or_else(absent));
        }
        let kind = found.first().map_or("absent", |(k, _)| *k);
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + found.len() * 2);
        parts.push(policy.as_bytes());
        for (k, v) in &found {
            parts.push(k.as_bytes());
            parts.push(v);
        }
        Ok((self.hasher.hash(&parts), kind))
    }

    /// The key of a limit of `policy` keyed by `ip` alone, for a client grouped as `grouped`:
    /// what [`KeyBuilder::key`] gives for `key = "ip"`, for a face that keys nothing else (the
    /// default service) and need not build the request's facts.
    pub fn ip_key(&self, policy: &str, grouped: IpAddr) -> KeyHash {
        match grouped {
            IpAddr::V4(a) => self.hasher.hash(&[policy.as_bytes(), KeySource::Ip.kind().as_bytes(), &a.octets()]),
            IpAddr::V6(a) => self.hasher.hash(&[policy.as_bytes(), KeySource::Ip.kind().as_bytes(), &a.octets()]),
        }
    }

    /// The first source of `chain` that the request has, with its kind; `ip` is the client's
    /// address as key material.
    fn first_of<'a>(
        &self,
        chain: &'a [KeySource],
        facts: &RequestFacts<'a>,
        memo: &TokenMemo,
        ip: &'a [u8],
    ) -> Result<Option<KeyPart<'a>>, KeyRefusal> {
        for source in chain {
            let value = match source {
                KeySource::Ip => Some(Cow::Borrowed(ip)),
                _ => self.value_of(source, facts, memo)?,
            };
            if let Some(v) = value {
                return Ok(Some((source.kind(), v)));
            }
        }
        Ok(None)
    }

    /// The key of a decision API check: the caller names the key itself, so it is hashed apart
    /// from every request key (a named key can never land in a request's bucket).
    pub fn named(&self, policy: &str, key: &str) -> KeyHash {
        self.hasher.hash(&[policy.as_bytes(), b"api", key.as_bytes()])
    }

    /// True when a limit chosen by plan applies to a request: its plan read from `choice.by`
    /// is the limit's, or, for the default, none of the others. A plan header is believed only
    /// from trusted peers (a client must not choose its own quota); from anyone else the
    /// request has no plan.
    pub fn plan_applies(
        &self,
        choice: &PlanChoice,
        facts: &RequestFacts<'_>,
        memo: &TokenMemo,
    ) -> Result<bool, KeyRefusal> {
        let plan = match &choice.by {
            KeySource::Header(_) if !facts.client.peer_trusted => None,
            by => self.value_of(by, facts, memo)?,
        };
        Ok(choice.applies(plan.as_deref()))
    }

    /// The key of an Envoy rate-limit descriptor under `policy` in `domain`: its entries
    /// (key, value) in order, hashed apart from request keys and named keys.
    pub fn descriptor(&self, policy: &str, domain: &str, entries: &[(&str, &str)]) -> KeyHash {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + entries.len() * 2);
        parts.extend([policy.as_bytes(), b"rls".as_slice(), domain.as_bytes()]);
        for (k, v) in entries {
            parts.push(k.as_bytes());
            parts.push(v.as_bytes());
        }
        self.hasher.hash(&parts)
    }

    /// The value of one source for a request: `Ok(None)` when absent (a later source of the
    /// chain is tried), an error when the request is ambiguous about it (or its token invalid,
    /// when invalid tokens are refused).
    fn value_of<'a>(
        &self,
        source: &'a KeySource,
        f: &RequestFacts<'a>,
        memo: &TokenMemo,
    ) -> Result<Option<Cow<'a, [u8]>>, KeyRefusal> {
        let header = |name: &str| {
            let mut lines = f.headers.get_all(name).iter();
            let first = lines.next();
            if lines.next().is_some() {
                return Err(KeyRefusal::RepeatedHeader(name.to_owned()));
            }
            if other_spelling(f.headers, name) {
                return Err(KeyRefusal::OtherSpelling(name.to_owned()));
            }
            match first.map(|v| v.as_bytes()).filter(|v| !v.is_empty()) {
                Some(v) if !v.iter().all(|&b| (b' '..=b'~').contains(&b)) => {
                    Err(KeyRefusal::HeaderValue(name.to_owned()))
                }
                v => Ok(v.map(Cow::Borrowed)),
            }
        };
        Ok(match source {
            KeySource::Ip => Some(Cow::Owned(match f.client.grouped {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            })),
            KeySource::Header(name) => header(name)?,
            KeySource::User => match (&self.user_header, f.client.peer_trusted) {
                // Only a trusted proxy sets the user header; anyone else's is not read at all.
                // An account name: compared as the application may compare it.
                (Some(name), true) => header(name)?
                    .map(|v| account_key(&String::from_utf8_lossy(&v)))
                    .filter(|k| !k.is_empty())
                    .map(|k| Cow::Owned(k.into_bytes())),
                _ => None,
            },
            // A body with an ambiguous keyed field was refused before keys were built.
            KeySource::Json(_) | KeySource::Form(_) => {
                source.body_field().and_then(|field| f.body?.key_text(field)).map(|t| Cow::Owned(t.into_bytes()))
            }
            // Routes match methods whatever their case, and HEAD as GET: keys read them alike.
            KeySource::Method => Some(match sluice_config::method::normal(f.method) {
                Cow::Borrowed(m) => Cow::Borrowed(m.as_bytes()),
                Cow::Owned(m) => Cow::Owned(m.into_bytes()),
            }),
            KeySource::Path => Some(Cow::Borrowed(without_format(f.path).as_bytes())),
            KeySource::Route => Some(Cow::Borrowed(f.route.as_bytes())),
            KeySource::Const(c) => Some(Cow::Borrowed(c.as_bytes())),
            // Verified by the handshake: nothing of the request's own can say it.
            KeySource::Tls(TlsName::San) => f.tls.and_then(|c| c.san()).map(|s| Cow::Borrowed(s.as_bytes())),
            KeySource::Tls(TlsName::Subject) => f.tls.map(|c| Cow::Borrowed(c.subject())),
            KeySource::Email(inner) => {
                self.value_of(inner, f, memo)?.and_then(|v| email_key(&v)).map(|e| Cow::Owned(e.into_bytes()))
            }
            KeySource::Jwt(pointer) => match &self.jwt {
                None => None,
                Some(verifier) if verifier.token_header().is_some_and(|h| other_spelling(f.headers, h)) => {
                    return Err(KeyRefusal::OtherSpelling(verifier.token_header().unwrap_or_default().to_owned()));
                }
                Some(verifier) => match memo.verdict(verifier, f.headers) {
                    TokenStatus::Repeated => {
                        let name = verifier.token_header().unwrap_or("authorization");
                        return Err(KeyRefusal::RepeatedHeader(name.to_owned()));
                    }
                    TokenStatus::Invalid if verifier.rejects_invalid() => return Err(KeyRefusal::InvalidToken),
                    verdict => verifier.claim(verdict, pointer).map(|c| Cow::Owned(c.to_vec())),
                },
            },
        })
    }
}

/// `path` without a format suffix on its last segment (`/api/items.json` is `/api/items`): Rails
/// and Spring serve both as one resource, and routes match both, so a `path` key part that told
/// them apart would give a fresh allowance per extension (`.json`, `.xml`, `.a`, `.b`...).
///
/// ```
/// # use sluice_http::keys::without_format;
/// assert_eq!(without_format("/api/items.json"), "/api/items");
/// assert_eq!(without_format("/api/v1.2/items.tar.gz"), "/api/v1.2/items");
/// assert_eq!(without_format("/.well-known/x"), "/.well-known/x");
/// assert_eq!(without_format("/a/.hidden"), "/a/.hidden");
/// ```
pub fn without_format(path: &str) -> &str {
    let last = path.rfind('/').map_or(0, |i| i + 1);
    match path[last..].find('.') {
        Some(dot) if dot > 0 => &path[..last + dot],
        _ => path,
    }
}

/// True when `headers` has a line whose name spells `name` with `_` where it has `-`
/// (`x_api_key` for `x-api-key`; names are lower case). Free when no name has a `_`.
///
/// ```
/// # use sluice_http::keys::other_spelling;
/// let mut h = http::HeaderMap::new();
/// h.insert("x-api-key", "k1".parse().unwrap());
/// assert!(!other_spelling(&h, "x-api-key"));
/// h.insert("x_api-key", "k2".parse().unwrap());
/// assert!(other_spelling(&h, "x-api-key"));
/// ```
pub fn other_spelling(headers: &HeaderMap, name: &str) -> bool {
    name.contains('-')
        && headers.keys().any(|n| {
            let n = n.as_str();
            n.len() == name.len()
                && n.contains('_')
                && n.bytes().zip(name.bytes()).all(|(a, b)| a == b || (a == b'_' && b == b'-'))
        })
}

/// An address as one account: its [`account_key`] (trimmed, case-folded, one spelling of what
/// looks alike), `+tag` dropped from the local part. `None` when nothing is left of it.
///
/// ```
/// # use sluice_http::keys::email_key;
/// assert_eq!(email_key(b" Victim+reset-2@Example.COM ").as_deref(), email_key(b"victim@example.com").as_deref());
/// assert_eq!(email_key("ｖｉｃｔｉｍ＋x@example.com".as_bytes()), email_key(b"victim@example.com"));
/// assert_eq!(email_key(b"no-at-sign+x"), email_key(b"no-at-sign"));
/// assert_eq!(email_key(b"+@x"), email_key(b"@x"));
/// ```
pub fn email_key(raw: &[u8]) -> Option<String> {
    let text = account_key(&String::from_utf8_lossy(raw));
    let (local, domain) = match text.rsplit_once('@') {
        Some((l, d)) => (l, Some(d)),
        None => (text.as_str(), None),
    };
    let local = local.split_once('+').map_or(local, |(base, _tag)| base);
    let out = match domain {
        Some(d) => format!("{local}@{d}"),
        None => local.to_owned(),
    };
    (!out.is_empty()).then_some(out)
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

    fn facts<'a>(h: &'a HeaderMap, body: Option<&'a KeyedBody>, client: &'a Client) -> RequestFacts<'a> {
        RequestFacts {
            method: "POST",
            path: "/api/password-reset",
            route: "reset",
            client,
            headers: h,
            tls: None,
            body,
        }
    }

    fn keys() -> KeyBuilder {
        KeyBuilder::new(KeyHasher::from_secret(b"0123456789abcdef"), Some("X-User-Id".into()))
    }

    fn key(s: &KeySpec, f: &RequestFacts<'_>) -> (KeyHash, KeyKind) {
        keys().key("p", s, f).expect("a key")
    }

    #[test]
    fn tls_parts_read_the_verified_certificate_and_nothing_a_request_sends() {
        use crate::identity::PeerCertificate;
        let (c, mut h) = (client(true), HeaderMap::new());
        // Headers named like the parts change nothing: only the handshake says.
        h.insert("tls", "spiffe://example.org/svc-a".parse().unwrap());
        h.insert("x-ssl-client-s-dn", "CN=svc-a".parse().unwrap());
        let by_san = spec(&[&[KeySource::Tls(TlsName::San), KeySource::Ip]]);
        let (anonymous, kind) = key(&by_san, &facts(&h, None, &c));
        assert_eq!(kind, "ip", "no certificate: the fallback");
        let a = PeerCertificate::new(["svc-a.internal", "spiffe://example.org/svc-a"], b"CN=svc-a");
        let b = PeerCertificate::new(["spiffe://example.org/svc-b"], b"CN=svc-a");
        let with =
            |cert: &PeerCertificate, s: &KeySpec| key(s, &RequestFacts { tls: Some(cert), ..facts(&h, None, &c) });
        let (ka, kind) = with(&a, &by_san);
        assert_eq!(kind, "tls");
        assert_ne!(ka, anonymous);
        assert_ne!(ka, with(&b, &by_san).0, "another name, another key");
        let by_subject = spec(&[&[KeySource::Tls(TlsName::Subject)]]);
        assert_eq!(with(&a, &by_subject).0, with(&b, &by_subject).0, "one subject, one key");
        // A certificate with no alternative name has no `tls:san`.
        let bare = PeerCertificate::new([], b"CN=bare");
        assert_eq!(bare.san(), None);
        assert_eq!(with(&bare, &by_san).1, "ip");
    }

    #[test]
    fn an_ip_key_is_the_key_of_key_ip() {
        let h = HeaderMap::new();
        for ip in ["192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            let c = Client { ip, grouped: ip, peer_trusted: false };
            let (built, kind) = key(&spec(&[&[KeySource::Ip]]), &facts(&h, None, &c));
            assert_eq!((keys().ip_key("p", ip), "ip"), (built, kind), "{ip}");
            assert_ne!(keys().ip_key("q", ip), built, "each policy its own key");
        }
    }

    #[test]
    fn json_keys_are_trimmed_and_lower_cased_and_absent_fields_share_a_key() {
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Json("/email".into())]]);
        let json = |t: &str| KeyedBody::Json(serde_json::from_str(t).unwrap());
        let (a, b, none) = (
            json(r#"{"email": "Victim@Example.com "}"#),
            json(r#"{"email": "victim@example.com"}"#),
            json(r#"{"other": 1}"#),
        );
        let ka = key(&s, &facts(&h, Some(&a), &c));
        assert_eq!(ka, key(&s, &facts(&h, Some(&b), &c)));
        assert_eq!(ka.1, "json");
        let kn = key(&s, &facts(&h, Some(&none), &c));
        assert_eq!(kn.1, "absent");
        assert_eq!(kn, key(&s, &facts(&h, None, &c)));
        assert_ne!(ka.0, kn.0);
    }

    #[test]
    fn user_header_is_believed_only_from_trusted_peers() {
        let mut h = HeaderMap::new();
        h.insert("x-user-id", "alice".parse().unwrap());
        let s = spec(&[&[KeySource::User, KeySource::Ip]]);
        assert_eq!(key(&s, &facts(&h, None, &client(true))).1, "user");
        assert_eq!(key(&s, &facts(&h, None, &client(false))).1, "ip");
        // Repeated from a trusted proxy: refused; from anyone else it is not read at all.
        h.append("x-user-id", "admin".parse().unwrap());
        assert_eq!(
            keys().key("p", &s, &facts(&h, None, &client(true))),
            Err(KeyRefusal::RepeatedHeader("x-user-id".into()))
        );
        assert_eq!(key(&s, &facts(&h, None, &client(false))).1, "ip");
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
    fn methods_are_keyed_as_routes_match_them() {
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Method]]);
        let with = |m: &'static str| key(&s, &RequestFacts { method: m, ..facts(&h, None, &c) });
        assert_eq!(with("GET"), with("get"));
        assert_eq!(with("GET"), with("HEAD"));
        assert_eq!(with("GET"), with("hEaD"));
        assert_ne!(with("GET"), with("POST"));
    }

    #[test]
    fn email_parts_fold_plus_tags_into_one_account() {
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Email(Box::new(KeySource::Json("/email".into())))]]);
        let json = |t: &str| KeyedBody::Json(serde_json::from_str(t).unwrap());
        let plain = json(r#"{"email":"victim@example.com"}"#);
        let tagged = json(r#"{"email":" Victim+reset9@Example.com"}"#);
        assert_eq!(key(&s, &facts(&h, Some(&plain), &c)), key(&s, &facts(&h, Some(&tagged), &c)));
        // Without email(...), a +tag is another account (the default keeps addresses apart).
        let raw = spec(&[&[KeySource::Json("/email".into())]]);
        assert_ne!(key(&raw, &facts(&h, Some(&plain), &c)).0, key(&raw, &facts(&h, Some(&tagged), &c)).0);
    }

    #[test]
    fn named_keys_never_meet_request_keys() {
        // A decision API caller naming the raw bytes a request key would hash cannot reach it.
        let h = HeaderMap::new();
        let c = client(false);
        let s = spec(&[&[KeySource::Const("global".into())]]);
        let request = key(&s, &facts(&h, None, &c)).0;
        assert_ne!(request, keys().named("p", "global"));
        assert_ne!(request, keys().named("p", "constglobal"));
    }

    #[test]
    fn keyed_header_values_must_be_printable_ascii_and_spelled_once() {
        let c = client(false);
        let s = spec(&[&[KeySource::Header("x-api-key".into()), KeySource::Ip]]);
        let with = |h: &HeaderMap| keys().key("p", &s, &facts(h, None, &c));
        // What Python's str.strip() would turn into KEY1: refused, never a fresh key.
        for raw in [&b"KEY1\xa0"[..], b"KEY1\x85", b"\xa0KEY1", b"KEY\t1", b"K\xc3\xa9Y1"] {
            let mut h = HeaderMap::new();
            h.insert("x-api-key", http::HeaderValue::from_bytes(raw).unwrap());
            assert_eq!(with(&h), Err(KeyRefusal::HeaderValue("x-api-key".into())), "{raw:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "KEY1 with spaces".parse().unwrap());
        assert_eq!(with(&h).unwrap().1, "header");
        // WSGI reads X_Api_Key as HTTP_X_API_KEY, the same as X-Api-Key: alone or beside it.
        let mut h = HeaderMap::new();
        h.insert("x_api_key", "KEY1".parse().unwrap());
        assert_eq!(with(&h), Err(KeyRefusal::OtherSpelling("x-api-key".into())));
        h.insert("x-api-key", "KEY2".parse().unwrap());
        assert_eq!(with(&h), Err(KeyRefusal::OtherSpelling("x-api-key".into())));
        // Other underscored names are no business of the key.
        let mut h = HeaderMap::new();
        h.insert("x_trace", "1".parse().unwrap());
        assert_eq!(with(&h).unwrap().1, "ip");
    }

    #[test]
    fn form_fields_and_account_spellings_share_the_accounts_key() {
        let h = HeaderMap::new();
        let c = client(false);
        let json = spec(&[&[KeySource::Json("/email".into())]]);
        let form = spec(&[&[KeySource::Form("email".into())]]);
        let as_json = |t: &str| {
            KeyedBody::Json(
                serde_json::from_str(&format!("{{\"email\":{}}}", serde_json::to_string(t).unwrap())).unwrap(),
            )
        };
        let as_form = |t: &[u8]| KeyedBody::Form(crate::form_body::FormBody::parse(t).unwrap());
        let victim = key(&json, &facts(&h, Some(&as_json("victim@example.com")), &c)).0;
        for spelling in [
            "ｖｉｃｔｉｍ@example.com",
            "vi\u{308}ctim@example.com",
            "v\u{131}ctim@example.com",
            "vic\u{200b}tim@example.com",
        ] {
            assert_eq!(key(&json, &facts(&h, Some(&as_json(spelling)), &c)).0, victim, "{spelling}");
        }
        let by_form = key(&form, &facts(&h, Some(&as_form(b"email=V%C3%8Fctim%40example.com")), &c));
        assert_eq!(by_form.1, "form");
        let plain_form = key(&form, &facts(&h, Some(&as_form(b"email=victim%40example.com")), &c));
        assert_eq!(by_form, plain_form);
        // A json: part reads nothing from a form body (and the other way round): absent.
        assert_eq!(key(&json, &facts(&h, Some(&as_form(b"email=victim%40example.com")), &c)).1, "absent");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// Any header name and value reach a key or a refusal, never a panic; a value with a byte
        /// outside printable ASCII, or a name that spells the keyed header with `_`, is refused.
        #[test]
        fn keyed_headers_are_keyed_or_refused_never_misread(
            name in proptest::prop_oneof![
                proptest::prelude::Just("x-api-key".to_string()),
                proptest::prelude::Just("x_api_key".to_string()),
                proptest::prelude::Just("x-api_key".to_string()),
                "[a-z_-]{1,12}",
            ],
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
        ) {
            let c = client(false);
            let s = spec(&[&[KeySource::Header("x-api-key".into()), KeySource::Ip]]);
            let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name.as_bytes()), http::HeaderValue::from_bytes(&value))
            else {
                return Ok(());
            };
            let mut h = HeaderMap::new();
            h.insert(n.clone(), v);
            let got = keys().key("p", &s, &facts(&h, None, &c));
            let printable = value.iter().all(|b| (b' '..=b'~').contains(b));
            if n.as_str() == "x-api-key" && !value.is_empty() && !printable {
                proptest::prop_assert_eq!(got, Err(KeyRefusal::HeaderValue("x-api-key".into())));
            } else if n.as_str() != "x-api-key" && n.as_str().replace('_', "-") == "x-api-key" {
                proptest::prop_assert_eq!(got, Err(KeyRefusal::OtherSpelling("x-api-key".into())));
            } else {
                proptest::prop_assert!(got.is_ok(), "{:?} {:?}: {:?}", name, value, got);
            }
        }
    }
}
