//! Signing keys made at test time (none is committed) and tokens signed with them, for the
//! JWT tests of sluice-http, sluice-gateway and the binary (included there by path).
#![allow(dead_code)]

use std::sync::OnceLock;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey;
use rand::RngCore;
use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey};
use rsa::{Generate, PrivateKey};
use serde_json::{Value, json};

/// The HS256 secret test configurations give (`hs256_secret`).
pub const HS_SECRET: &str = "a test secret of at least sixteen characters";

/// A signing key and its public JWK.
pub struct TestKey {
    /// What it signs with.
    pub algorithm: Algorithm,
    /// The private key.
    pub encoding: EncodingKey,
    /// Its `kid`.
    pub kid: String,
    /// The public key as a JWK (kid included); `None` for the HMAC secret.
    pub jwk: Option<Value>,
    /// For RSA: the public key's PKCS#1 DER, the bytes an algorithm-confusion attacker would
    /// use as an HMAC secret.
    pub public_der: Option<Vec<u8>>,
}

impl TestKey {
    /// A token of `claims` signed with this key, its header naming the key's algorithm and kid.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("the test token signs")
    }

    /// Like [`TestKey::sign`], with no kid in the header.
    pub fn sign_without_kid(&self, claims: &Value) -> String {
        jsonwebtoken::encode(&Header::new(self.algorithm), claims, &self.encoding).expect("the test token signs")
    }
}

fn with_jwk(algorithm: Algorithm, encoding: EncodingKey, kid: &str, public_der: Option<Vec<u8>>) -> TestKey {
    let mut jwk = Jwk::from_encoding_key(&encoding, algorithm).expect("a public JWK");
    jwk.common.key_id = Some(kid.to_owned());
    let jwk = serde_json::to_value(&jwk).expect("a JWK serialises");
    TestKey { algorithm, encoding, kid: kid.to_owned(), jwk: Some(jwk), public_der }
}

/// The HS256 key of [`HS_SECRET`].
pub fn hs256() -> TestKey {
    let encoding = EncodingKey::from_secret(HS_SECRET.as_bytes()).expect("an HMAC key");
    TestKey { algorithm: Algorithm::HS256, encoding, kid: "hs".into(), jwk: None, public_der: None }
}

/// A fresh RSA-2048 key (kid `kid`). Generation is slow without optimisation: tests share
/// [`rs256`] and [`rs256_other`].
pub fn new_rs256(kid: &str) -> TestKey {
    let private = PrivateKey::generate();
    let der = private.to_pkcs1_der().expect("PKCS#1 DER").as_bytes().to_vec();
    let public = private.to_public_key().to_pkcs1_der().expect("public DER").as_bytes().to_vec();
    with_jwk(Algorithm::RS256, EncodingKey::from_rsa_der(&der), kid, Some(public))
}

/// The RSA key these tests share (kid `rsa-1`).
pub fn rs256() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(|| new_rs256("rsa-1"))
}

/// A second RSA key (kid `rsa-2`): the key a rotation moves to.
pub fn rs256_other() -> &'static TestKey {
    static KEY: OnceLock<TestKey> = OnceLock::new();
    KEY.get_or_init(|| new_rs256("rsa-2"))
}

/// A fresh P-256 key.
pub fn es256(kid: &str) -> TestKey {
    let secret = loop {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        if let Ok(k) = p256::SecretKey::from_slice(&bytes) {
            break k;
        }
    };
    let der = secret.to_pkcs8_der().expect("PKCS#8 DER").as_bytes().to_vec();
    with_jwk(Algorithm::ES256, EncodingKey::from_ec_der(&der), kid, None)
}

/// A fresh Ed25519 key.
pub fn ed25519(kid: &str) -> TestKey {
    // PKCS#8 v1 of an Ed25519 seed (RFC 8410): a fixed 16-byte prefix, then the 32-byte seed.
    let mut der = vec![0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    let mut seed = [0u8; 32];
    rand::rng().fill_bytes(&mut seed);
    der.extend_from_slice(&seed);
    with_jwk(Algorithm::EdDSA, EncodingKey::from_ed_der(&der), kid, None)
}

/// A JWK set of these keys' public halves.
pub fn jwks(keys: &[&TestKey]) -> String {
    json!({ "keys": keys.iter().filter_map(|k| k.jwk.clone()).collect::<Vec<_>>() }).to_string()
}

/// Unix seconds now (tokens checked against the system clock are signed relative to it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs()
}

/// Claims for `sub` valid from an hour ago for an hour from `now`, with `extra` members.
pub fn claims_at(now: u64, sub: &str, extra: Value) -> Value {
    let mut c = json!({ "sub": sub, "iat": now, "nbf": now - 3600, "exp": now + 3600 });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    c
}

/// [`claims_at`] the system clock's now.
pub fn claims(sub: &str, extra: Value) -> Value {
    claims_at(unix_now(), sub, extra)
}

/// A token with `alg: none` and no signature, claiming `claims`.
pub fn unsigned(claims: &Value) -> String {
    format!("{}.{}.", b64url(br#"{"alg":"none","typ":"JWT"}"#), b64url(claims.to_string().as_bytes()))
}

/// Unpadded base64url (RFC 4648 §5), for hand-made token parts.
pub fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// `token` with its signature replaced by another of the same length.
pub fn forged(token: &str) -> String {
    let (signed, sig) = token.rsplit_once('.').expect("three parts");
    let flipped: String =
        sig.chars().enumerate().map(|(i, c)| if i == 0 { if c == 'A' { 'B' } else { 'A' } } else { c }).collect();
    format!("{signed}.{flipped}")
}

/// Writes `contents` to a fresh file named `name` under `dir` and returns its path.
pub fn write_file(dir: &std::path::Path, name: &str, contents: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("the test folder");
    let path = dir.join(format!("{name}-{}-{}", std::process::id(), rand::rng().next_u64()));
    std::fs::write(&path, contents).expect("the test file writes");
    path
}
