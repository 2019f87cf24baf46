//! Identity from verified bearer tokens: the `jwt:CLAIM` key part and plans read from tokens.
//!
//! A request's token is read from one `Authorization: Bearer` line (or the configured header or
//! cookie, see [`find_token`]), verified once by a [`JwtVerifier`] (signature with a key of the
//! token's own algorithm, `exp`, `nbf`, `iss`, `aud`), and its verdict cached by the token's
//! keyed hash. A claim counts only from a token that verifies. With no token, a `jwt:` part is
//! absent (so `jwt:sub|ip` falls back to the address); a token that is present but forged,
//! expired, misdirected or malformed is refused with 401 (`on_invalid_token = "reject"`, the
//! default: lenient applications may still accept it, and the address's allowance is not its
//! to take), or treated as absent with `on_invalid_token = "fallback"`; a token header in two
//! lines is refused with 400.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_config::{KeySource, KeySpec, parse};
//! use sluice_core::SystemClock;
//! use sluice_http::identity::Client;
//! use sluice_http::jwt::JwtVerifier;
//! use sluice_http::keys::{KeyBuilder, RequestFacts};
//! use sluice_store::KeyHasher;
//! let cfg = parse("s.toml", "[identity.jwt]\nhs256_secret = \"a secret of sixteen or more\"\n").unwrap();
//! let hasher = KeyHasher::from_secret(b"0123456789abcdef");
//! let verifier = JwtVerifier::new(cfg.identity.jwt.as_ref().unwrap(), hasher.clone(),
//!                                 Arc::new(SystemClock::new()), vec!["/sub".into()]);
//! let keys = KeyBuilder::new(hasher, None).with_jwt(Some(Arc::new(verifier)));
//! let spec = KeySpec { parts: vec![vec![KeySource::Jwt("/sub".into()), KeySource::Ip]] };
//! let ip = "192.0.2.1".parse().unwrap();
//! let client = Client { ip, grouped: ip, peer_trusted: false };
//! let mut headers = http::HeaderMap::new();
//! // No token: the key falls back to the address.
//! let facts = RequestFacts { method: "GET", path: "/", route: "/", client: &client, headers: &headers, tls: None, body: None };
//! assert_eq!(keys.key("p", &spec, &facts).unwrap().1, "ip");
//! // A token that does not verify is refused (401), never traded for the address's allowance.
//! headers.insert("authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ2aWN0aW0ifQ.bm9wZQ".parse().unwrap());
//! let facts = RequestFacts { method: "GET", path: "/", route: "/", client: &client, headers: &headers, tls: None, body: None };
//! assert!(keys.key("p", &spec, &facts).is_err());
//! ```

mod cache;
mod claims;
mod token;
mod verifier;

use std::cell::OnceCell;

use http::HeaderMap;

pub use cache::TokenCache;
pub use claims::claim_key;
pub use token::{Found, MAX_TOKEN_BYTES, find_token};
pub use verifier::{JwtVerifier, TokenStatus, Verified};

/// A request's token verdict, worked out at most once however many limits read it.
#[derive(Debug, Default)]
pub struct TokenMemo(OnceCell<TokenStatus>);

impl TokenMemo {
    /// The verdict of `verifier` on the token in `headers`, reused after the first call.
    pub fn verdict(&self, verifier: &JwtVerifier, headers: &HeaderMap) -> &TokenStatus {
        self.0.get_or_init(|| verifier.verdict(headers))
    }
}
