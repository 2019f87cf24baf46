//! Identity from verified bearer tokens: the `jwt:CLAIM` key part and plans read from tokens.
//!
//! A request's token is read from one `Authorization: Bearer` line (or the configured header or
//! cookie, see [`find_token`]), verified once by a [`JwtVerifier`] (signature with a key of the
//! token's own algorithm, `exp`, `nbf`, `iss`, `aud`), and its verdict cached by the token's
//! keyed hash. A claim counts only from a token that verifies: with no token, a forged,
//! expired or misdirected one, a `jwt:` part is absent (so `jwt:sub|ip` falls back to the
//! address), or the request is refused with 401 when `on_invalid_token = "reject"`.
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
//! // A token that does not verify is no identity: the key falls back to the address.
//! headers.insert("authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ2aWN0aW0ifQ.bm9wZQ".parse().unwrap());
//! let facts = RequestFacts { method: "GET", path: "/", route: "/", client: &client, headers: &headers, json: None };
//! assert_eq!(keys.key("p", &spec, &facts).unwrap().1, "ip");
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
pub use verifier::{JwtVerifier, Verdict, Verified};

/// A request's token verdict, worked out at most once however many limits read it.
#[derive(Debug, Default)]
pub struct TokenMemo(OnceCell<Verdict>);

impl TokenMemo {
    /// The verdict of `verifier` on the token in `headers`, reused after the first call.
    pub fn verdict(&self, verifier: &JwtVerifier, headers: &HeaderMap) -> &Verdict {
        self.0.get_or_init(|| verifier.verdict(headers))
    }
}
