//! Verifying bearer tokens once and remembering the verdict.

use std::sync::Arc;

use http::HeaderMap;
#[cfg(feature = "jwt")]
use jsonwebtoken::crypto::CryptoProvider;
#[cfg(feature = "jwt")]
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
#[cfg(feature = "jwt")]
use serde_json::Value;
#[cfg(feature = "jwt")]
use sluice_config::{Jwt, JwtAlgorithm, JwtKeyMaterial};
use sluice_config::{OnInvalidToken, TokenSource};
use sluice_core::{Clock, NANOS_PER_SEC};
use sluice_store::{KeyHash, KeyHasher};

use super::cache::TokenCache;
#[cfg(feature = "jwt")]
use super::claims::claim_key;
use super::token::{Found, find_token};

/// What a request's token amounts to.
#[derive(Debug, Clone)]
pub enum TokenStatus {
    /// The request carries no token.
    Absent,
    /// The token header came in several lines (see [`Found::Repeated`]).
    Repeated,
    /// It carries one that does not verify now (malformed, bad signature, wrong algorithm,
    /// expired or not yet valid, another issuer or audience).
    Invalid,
    /// It carries a token that verifies now.
    Valid(Arc<Verified>),
}

/// A verified token, as far as keys need it: the claims the configuration reads, and when it
/// is valid. The raw token and the rest of its payload are not kept.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified {
    /// The key bytes of each claim the verifier reads (its `pointers`, same order); `None`
    /// where the token lacks that claim or holds no keyable value there.
    claims: Vec<Option<Box<[u8]>>>,
    /// Unix second from which it is valid (`nbf` less the leeway; 0 without `nbf`).
    from: u64,
    /// Unix second from which it is expired (`exp` plus the leeway).
    until: u64,
}

impl Verified {
    fn valid_at(&self, now: u64) -> bool {
        self.from <= now && now < self.until
    }
}

/// A verification key with the one algorithm it may verify.
#[cfg(feature = "jwt")]
struct Key {
    /// The JWK `kid`, if any.
    kid: Option<String>,
    /// The only algorithm accepted with this key.
    algorithm: Algorithm,
    /// The key, for the JOSE crate.
    key: DecodingKey,
}

/// Without the `jwt` feature there is no key, and no verifier can be made ([`JwtVerifier::new`]
/// is the feature's): a `jwt:` key part is refused where limits are built.
#[cfg(not(feature = "jwt"))]
enum Key {}

/// Verifies the tokens of `[identity.jwt]` and caches each verdict by the token's keyed hash:
/// a valid token costs one lookup until it expires; an invalid one costs one verification,
/// then one lookup (invalid verdicts are cached apart, so a flood of forged tokens cannot push
/// valid ones out). Both caches are bounded by `cache_entries`.
///
/// A key verifies only its own algorithm: a token's `alg` picks nothing by itself, so an RSA
/// public key is never taken as an HMAC secret, and `alg: none` matches no key.
///
/// ```
/// use std::sync::Arc;
/// use sluice_config::parse;
/// use sluice_core::ManualClock;
/// use sluice_http::jwt::{JwtVerifier, TokenStatus};
/// use sluice_store::KeyHasher;
/// let cfg = parse("s.toml", "[identity.jwt]\nhs256_secret = \"a secret of sixteen or more\"\n").unwrap();
/// let clock = Arc::new(ManualClock::new(1_700_000_000_000_000_000));
/// let v = JwtVerifier::new(cfg.identity.jwt.as_ref().unwrap(), KeyHasher::random(), clock, vec!["/sub".into()]);
/// let mut h = http::HeaderMap::new();
/// assert!(matches!(v.verdict(&h), TokenStatus::Absent));
/// h.insert("authorization", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ2aWN0aW0ifQ.".parse().unwrap());
/// assert!(matches!(v.verdict(&h), TokenStatus::Invalid), "alg: none is no signature");
/// ```
pub struct JwtVerifier {
    /// The keys tokens may be signed with.
    keys: Vec<Key>,
    /// Where tokens are read.
    token: TokenSource,
    /// The required `iss`, if any.
    issuer: Option<String>,
    /// A value the `aud` must hold, if any.
    audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    leeway: u64,
    /// Whether an invalid token refuses the request.
    on_invalid: OnInvalidToken,
    /// The claims keys may read (JSON pointers), in the order [`Verified`] holds them.
    pointers: Vec<String>,
    /// Keys the caches by token (keyed, so no one can aim a token at another's entry).
    hasher: KeyHasher,
    /// Tokens that verified, until they expire.
    valid: TokenCache<Arc<Verified>>,
    /// Tokens that never will (malformed, forged, expired, for someone else).
    invalid: TokenCache<()>,
    /// The wall clock `exp` and `nbf` are read against (Unix nanoseconds).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("token", &self.token)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .field("on_invalid", &self.on_invalid)
            .field("pointers", &self.pointers)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// A verifier of `config`'s tokens reading the claims at `pointers`, caching by `hasher`'s
    /// keyed hash, judging `exp` and `nbf` by `clock` (Unix nanoseconds).
    #[cfg(feature = "jwt")]
    pub fn new(config: &Jwt, hasher: KeyHasher, clock: Arc<dyn Clock>, pointers: Vec<String>) -> Self {
        if CryptoProvider::try_get_default().is_none() {
            // Several backends compiled in and none chosen: choose the pure-Rust one.
            let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        }
        let keys = config
            .keys
            .iter()
            .filter_map(|k| {
                let key = match &k.material {
                    JwtKeyMaterial::Secret(s) => DecodingKey::from_secret(s.expose().as_bytes()),
                    JwtKeyMaterial::Rsa { n, e } => DecodingKey::from_rsa_components(n, e),
                    JwtKeyMaterial::Ec { x, y } => DecodingKey::from_ec_components(x, y),
                    JwtKeyMaterial::Ed { x } => DecodingKey::from_ed_components(x),
                };
                let algorithm = match k.algorithm {
                    JwtAlgorithm::Hs256 => Algorithm::HS256,
                    JwtAlgorithm::Rs256 => Algorithm::RS256,
                    JwtAlgorithm::Es256 => Algorithm::ES256,
                    JwtAlgorithm::EdDsa => Algorithm::EdDSA,
                };
                // The configuration checked each key's form; one the crate still refuses verifies nothing.
                key.ok().map(|key| Key { kid: k.kid.clone(), algorithm, key })
            })
            .collect();
        Self {
            keys,
            token: config.token.clone(),
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            leeway: config.leeway.div_ceil(NANOS_PER_SEC),
            on_invalid: config.on_invalid_token,
            pointers,
            hasher,
            valid: TokenCache::new(config.cache_entries),
            invalid: TokenCache::new(config.cache_entries),
            clock,
        }
    }

    /// True when a request with an invalid token is refused (401) rather than keyed without it.
    pub fn rejects_invalid(&self) -> bool {
        self.on_invalid == OnInvalidToken::Reject
    }

    /// The claims [`Verified`] holds, in its order.
    pub fn pointers(&self) -> &[String] {
        &self.pointers
    }

    /// The token of a request with `headers`, verified (or remembered).
    pub fn verdict(&self, headers: &HeaderMap) -> TokenStatus {
        let token = match find_token(headers, &self.token) {
            Found::Absent => return TokenStatus::Absent,
            Found::Repeated => return TokenStatus::Repeated,
            Found::Malformed => return TokenStatus::Invalid,
            Found::Token(t) => t,
        };
        self.verdict_of(token)
    }

    /// The verdict on one compact token.
    pub fn verdict_of(&self, token: &str) -> TokenStatus {
        let now = self.clock.now() / NANOS_PER_SEC;
        let id = self.hasher.hash(&[b"jwt", token.as_bytes()]);
        if let Some(v) = self.valid.get(&id) {
            return if v.valid_at(now) { TokenStatus::Valid(v) } else { TokenStatus::Invalid };
        }
        if self.invalid.get(&id).is_some() {
            return TokenStatus::Invalid;
        }
        self.verify(id, token, now)
    }

    /// Verifies `token` (hashed `id`) at Unix second `now` and caches the verdict.
    fn verify(&self, id: KeyHash, token: &str, now: u64) -> TokenStatus {
        let Some(verified) = self.check(token) else {
            self.invalid.insert(id, ());
            return TokenStatus::Invalid;
        };
        if now >= verified.until {
            self.invalid.insert(id, ());
            return TokenStatus::Invalid;
        }
        let verified = Arc::new(verified);
        // A token not valid yet is remembered too: it becomes valid without a second verification.
        self.valid.insert(id, verified.clone());
        if verified.valid_at(now) { TokenStatus::Valid(verified) } else { TokenStatus::Invalid }
    }

    /// No verifier exists without the `jwt` feature: nothing verifies.
    #[cfg(not(feature = "jwt"))]
    fn check(&self, _: &str) -> Option<Verified> {
        None
    }

    /// The token's signature, issuer and audience checked, its times read; `None` when it does
    /// not verify with any key allowed for its algorithm.
    #[cfg(feature = "jwt")]
    fn check(&self, token: &str) -> Option<Verified> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        // A token naming a kid is tried with that key only; otherwise with each key of its algorithm.
        let named = header.kid.as_deref().filter(|kid| self.keys.iter().any(|k| k.kid.as_deref() == Some(*kid)));
        let payload = self
            .keys
            .iter()
            .filter(|k| k.algorithm == header.alg && named.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
            .find_map(|k| {
                let mut v = Validation::new(k.algorithm);
                // Times, issuer and audience are judged below, against the limiter's clock.
                v.required_spec_claims.clear();
                v.validate_exp = false;
                v.validate_nbf = false;
                v.validate_aud = false;
                jsonwebtoken::decode::<Value>(token, &k.key, &v).ok()
            })?
            .claims;
        let seconds = |name: &str| -> Result<Option<u64>, ()> {
            match payload.get(name) {
                None => Ok(None),
                Some(Value::Number(n)) => {
                    n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)).map(Some).ok_or(())
                }
                Some(_) => Err(()),
            }
        };
        // A token without `exp` never expires: not accepted (nor cached forever).
        let exp = seconds("exp").ok()??;
        let nbf = seconds("nbf").ok()?;
        if let Some(issuer) = &self.issuer
            && payload.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return None;
        }
        if let Some(audience) = &self.audience {
            let ok = match payload.get("aud") {
                Some(Value::String(a)) => a == audience,
                Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(audience.as_str())),
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        let claims = self.pointers.iter().map(|p| payload.pointer(p).and_then(claim_key)).collect();
        Some(Verified {
            claims,
            from: nbf.map_or(0, |n| n.saturating_sub(self.leeway)),
            until: exp.saturating_add(self.leeway),
        })
    }

    /// The key bytes of the claim at `pointer` in a valid verdict.
    pub fn claim<'v>(&self, verdict: &'v TokenStatus, pointer: &str) -> Option<&'v [u8]> {
        let TokenStatus::Valid(v) = verdict else { return None };
        let i = self.pointers.iter().position(|p| p == pointer)?;
        v.claims.get(i)?.as_deref()
    }

    /// The header the token is read from, if it is read from a header.
    pub fn token_header(&self) -> Option<&str> {
        match &self.token {
            TokenSource::Header(h) => Some(h),
            TokenSource::Cookie(_) => None,
        }
    }

    /// Tokens remembered now: (valid, invalid).
    pub fn cached(&self) -> (usize, usize) {
        (self.valid.len(), self.invalid.len())
    }
}
