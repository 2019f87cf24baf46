//! `[identity.jwt]`: where bearer tokens are read and the keys that verify them, a JWK set file
//! included (read at load, so a reload picks up a rotated key set).

use std::collections::HashSet;

use toml::Spanned;

use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::{Identity, Jwt, JwtAlgorithm, JwtKey, JwtKeyMaterial, OnInvalidToken, TokenSource};
use crate::raw::{RawIdentity, RawJwk, RawJwks, RawJwt};
use crate::secret::read_secret;

/// Verified tokens remembered by default (and, apart, as many invalid ones).
pub const DEFAULT_JWT_CACHE_ENTRIES: usize = 10_000;

/// The most `cache_entries` may ask.
const MAX_JWT_CACHE_ENTRIES: usize = 10_000_000;

/// Base64url characters in the modulus of a 2048-bit RSA key, the smallest sluice accepts.
const RSA_2048_CHARS: usize = 342;

/// Base64url characters (unpadded) of 32 bytes: a P-256 coordinate, an Ed25519 key.
const BYTES_32_CHARS: usize = 43;

pub(crate) fn identity(src: &Source<'_>, raw: Option<Spanned<RawIdentity>>) -> Result<Identity, ConfigError> {
    let Some(jwt) = raw.and_then(|r| r.into_inner().jwt) else { return Ok(Identity::default()) };
    let span = jwt.span();
    let j: RawJwt = jwt.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("identity.jwt.{field}"), msg);
    let mut keys = Vec::new();
    let hs = read_secret(
        src,
        &span,
        "identity.jwt",
        "hs256_secret",
        (j.hs256_secret, j.hs256_secret_file, j.hs256_secret_env),
    )?;
    if let Some(s) = hs {
        keys.push(JwtKey { kid: None, algorithm: JwtAlgorithm::Hs256, material: JwtKeyMaterial::Secret(s) });
    }
    let jwks_file = j.jwks_file.map(|f| src.beside(&f));
    if let Some(path) = &jwks_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("jwks_file", format!("cannot read `{}`: {e}", path.display())))?;
        let set = jwks(&text).map_err(|m| err("jwks_file", format!("`{}`: {m}", path.display())))?;
        keys.extend(set);
    }
    if keys.is_empty() {
        return Err(err(
            "hs256_secret",
            "[identity.jwt] needs a key: `hs256_secret` (or `hs256_secret_file`, `hs256_secret_env`) or `jwks_file`"
                .into(),
        ));
    }
    let token = match (j.header, j.cookie) {
        (Some(_), Some(_)) => return Err(err("cookie", "give `header` or `cookie`, not both".into())),
        (None, Some(c)) if !is_token(&c) => return Err(err("cookie", format!("`{c}` is not a cookie name"))),
        (None, Some(c)) => TokenSource::Cookie(c),
        (Some(h), None) if !is_token(&h) => return Err(err("header", format!("`{h}` is not a header name"))),
        (h, None) => TokenSource::Header(h.unwrap_or_else(|| "authorization".into()).to_ascii_lowercase()),
    };
    for (field, value) in [("issuer", &j.issuer), ("audience", &j.audience)] {
        if value.as_deref() == Some("") {
            return Err(err(field, "must not be empty (leave it out to skip the check)".into()));
        }
    }
    let leeway = parse_duration(j.leeway.as_deref().unwrap_or("30s")).map_err(|m| err("leeway", m))?;
    let on_invalid_token = match j.on_invalid_token.as_deref().unwrap_or("reject") {
        "fallback" => OnInvalidToken::Fallback,
        "reject" => OnInvalidToken::Reject,
        other => return Err(err("on_invalid_token", format!("`{other}` is neither `fallback` nor `reject`"))),
    };
    let cache_entries = j.cache_entries.unwrap_or(DEFAULT_JWT_CACHE_ENTRIES);
    if !(1..=MAX_JWT_CACHE_ENTRIES).contains(&cache_entries) {
        return Err(err("cache_entries", format!("{cache_entries} is not between 1 and {MAX_JWT_CACHE_ENTRIES}")));
    }
    let jwt =
        Jwt { keys, jwks_file, token, issuer: j.issuer, audience: j.audience, leeway, on_invalid_token, cache_entries };
    Ok(Identity { jwt: Some(jwt) })
}

/// The verification keys of a JWK set (RFC 7517). Keys for encryption (`use: "enc"`) and keys
/// of algorithms sluice does not verify are skipped; a private key, a symmetric key, a
/// malformed or short key, or a repeated `kid` is an error, and so is a set with no usable key.
///
/// ```text
/// {"keys": [{"kty": "RSA", "kid": "2024", "alg": "RS256", "n": "...", "e": "AQAB"},
///           {"kty": "EC", "crv": "P-256", "x": "...", "y": "..."},
///           {"kty": "OKP", "crv": "Ed25519", "x": "..."}]}
/// ```
fn jwks(text: &str) -> Result<Vec<JwtKey>, String> {
    let set: RawJwks = serde_json::from_str(text).map_err(|e| format!("not a JWK set (`{{\"keys\": [...]}}`): {e}"))?;
    let mut keys = Vec::with_capacity(set.keys.len());
    let mut kids = HashSet::new();
    for (i, k) in set.keys.into_iter().enumerate() {
        let key = jwk(&k).map_err(|m| format!("keys[{i}]: {m}"))?;
        let Some(key) = key else { continue };
        if let Some(kid) = &key.kid
            && !kids.insert(kid.clone())
        {
            return Err(format!("keys[{i}]: the kid `{kid}` is given twice"));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("holds no key that sluice verifies with (RS256, ES256, EdDSA signature keys)".into());
    }
    Ok(keys)
}

/// One JWK as a verification key; `None` when it is not for sluice (encryption, another
/// algorithm or curve).
fn jwk(k: &RawJwk) -> Result<Option<JwtKey>, String> {
    if k.d.is_some() {
        return Err("is a private key (it has `d`): a JWK set for verification holds public keys only".into());
    }
    if k.use_.as_deref().is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    let member = |name: &str, value: &Option<String>, chars: Option<usize>| -> Result<String, String> {
        let v = value.as_deref().ok_or_else(|| format!("a `{}` key needs `{name}`", k.kty))?;
        if !is_base64url(v) {
            return Err(format!("`{name}` is not unpadded base64url"));
        }
        match chars {
            Some(n) if v.len() != n => Err(format!("`{name}` is not 32 bytes")),
            _ => Ok(v.to_owned()),
        }
    };
    let (algorithm, material) = match (k.kty.as_str(), k.crv.as_deref()) {
        ("oct", _) => {
            return Err("a symmetric (`oct`) key does not belong in a public key set: use `hs256_secret`".into());
        }
        ("RSA", _) if k.alg.as_deref().is_none_or(|a| a == "RS256") => {
            let n = member("n", &k.n, None)?;
            if n.trim_start_matches('A').len() < RSA_2048_CHARS {
                return Err("the RSA modulus is shorter than 2048 bits".into());
            }
            let e = member("e", &k.e, None)?;
            if e.len() > 8 {
                return Err("the RSA exponent is too large".into());
            }
            (JwtAlgorithm::Rs256, JwtKeyMaterial::Rsa { n, e })
        }
        ("EC", Some("P-256")) if k.alg.as_deref().is_none_or(|a| a == "ES256") => {
            let (x, y) = (member("x", &k.x, Some(BYTES_32_CHARS))?, member("y", &k.y, Some(BYTES_32_CHARS))?);
            (JwtAlgorithm::Es256, JwtKeyMaterial::Ec { x, y })
        }
        ("OKP", Some("Ed25519")) if k.alg.as_deref().is_none_or(|a| a == "EdDSA" || a == "Ed25519") => {
            (JwtAlgorithm::EdDsa, JwtKeyMaterial::Ed { x: member("x", &k.x, Some(BYTES_32_CHARS))? })
        }
        _ => return Ok(None),
    };
    Ok(Some(JwtKey { kid: k.kid.clone(), algorithm, material }))
}

/// Unpadded base64url (RFC 4648 §5), of a length some bytes encode to.
fn is_base64url(v: &str) -> bool {
    !v.is_empty() && v.len() % 4 != 1 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// An HTTP token (RFC 9110 §5.6.2): what header and cookie names are made of.
fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    #[test]
    fn jwk_sets_keep_signature_keys_and_refuse_what_would_be_unsafe() {
        let n = "A".repeat(10) + &"x".repeat(RSA_2048_CHARS);
        let set = format!(
            r#"{{"keys": [
                {{"kty": "RSA", "kid": "r", "n": "{n}", "e": "AQAB"}},
                {{"kty": "RSA", "use": "enc", "n": "{n}", "e": "AQAB"}},
                {{"kty": "RSA", "alg": "PS256", "n": "{n}", "e": "AQAB"}},
                {{"kty": "EC", "crv": "P-256", "x": "{X}", "y": "{X}"}},
                {{"kty": "EC", "crv": "P-384", "x": "{X}", "y": "{X}"}},
                {{"kty": "OKP", "crv": "Ed25519", "x": "{X}"}}
            ]}}"#
        );
        let keys = jwks(&set).unwrap();
        let algs: Vec<_> = keys.iter().map(|k| k.algorithm).collect();
        assert_eq!(algs, [JwtAlgorithm::Rs256, JwtAlgorithm::Es256, JwtAlgorithm::EdDsa]);
        assert_eq!(keys[0].kid.as_deref(), Some("r"));
        let one = |k: &str| jwks(&format!(r#"{{"keys": [{k}]}}"#)).unwrap_err();
        assert!(one(r#"{"kty": "oct", "k": "c2VjcmV0"}"#).contains("hs256_secret"));
        assert!(one(&format!(r#"{{"kty": "OKP", "crv": "Ed25519", "x": "{X}", "d": "{X}"}}"#)).contains("private"));
        assert!(one(r#"{"kty": "RSA", "n": "AQAB", "e": "AQAB"}"#).contains("2048"));
        assert!(one(r#"{"kty": "OKP", "crv": "Ed25519", "x": "short1"}"#).contains("32 bytes"));
        assert!(one(&format!(r#"{{"kty": "OKP", "crv": "Ed25519", "x": "{X}="}}"#)).contains("base64url"));
        assert!(one(r#"{"kty": "EC", "crv": "P-256"}"#).contains("needs `x`"));
        assert!(one(r#"{"kty": "EC", "crv": "P-384", "x": "a", "y": "b"}"#).contains("no key"));
        let twice = format!(
            r#"{{"keys": [{{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "{X}"}}, {{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "{X}"}}]}}"#
        );
        assert!(jwks(&twice).unwrap_err().contains("twice"));
        assert!(jwks("[]").unwrap_err().contains("not a JWK set"));
    }
}
