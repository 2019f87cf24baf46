//! What ties a snapshot to the key secret: a fingerprint of the secret (never the secret), a
//! fingerprint of each policy, and the key of the checksum, all derived with the keyed SipHash
//! of [`KeyHasher`] under labels no request key can take.
//!
//! The checksum is SipHash-2-4 with 128-bit output keyed by a key derived from the secret: a
//! pseudo-random function, so a file changed by anyone who lacks the secret (a flipped bit, a
//! truncation, a forged state) fails it with probability 1 - 2^-128, and the same function
//! already trusted with every key hash needs no new dependency. An unkeyed 128-bit hash would
//! catch accidents as well, but anyone who can write the file could recompute it.

use siphasher::sip128::SipHasher24;

use crate::key::KeyHasher;
use crate::store::NamedPolicy;

/// The first part of every derivation. Request keys start with a policy name, the seed
/// service's with `ip`; none starts with a NUL byte.
const DOMAIN: &[u8] = b"\0sluice-snapshot";

/// A fingerprint of the key secret: equal for one secret, unrelated for another, and no help
/// in finding it (a keyed PRF's output on a fixed input).
pub(crate) fn secret_fingerprint(secret: &KeyHasher) -> [u8; 16] {
    secret.hash(&[DOMAIN, b"secret"]).0
}

/// A fingerprint of a policy's name and parameters (as this build spells them): equal exactly
/// when a reload would keep the policy's table.
pub(crate) fn policy_fingerprint(secret: &KeyHasher, policy: &NamedPolicy) -> [u8; 16] {
    let params = format!("{:?}", policy.policy);
    secret.hash(&[DOMAIN, b"policy", policy.name.as_bytes(), params.as_bytes()]).0
}

/// The checksum, keyed from the secret, ready to be fed every byte of the file.
pub(crate) fn checksum(secret: &KeyHasher) -> SipHasher24 {
    SipHasher24::new_with_key(&secret.hash(&[DOMAIN, b"checksum"]).0)
}
