//! Keys as keyed 128-bit hashes: raw identities never reach a store or a log.

use siphasher::sip128::{Hasher128, SipHasher24};
use std::fmt;
use std::hash::Hasher;

/// A limit key after hashing: 128 bits of SipHash-2-4 under a secret key.
///
/// Unkeyed, a short key (an IPv4 address) could be reversed by trying all 2^32 values; keyed and
/// 128 bits wide, it can be neither reversed nor steered into a victim's bucket.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyHash(pub [u8; 16]);

impl KeyHash {
    /// Lower-case hex, 32 characters: the form used in logs and Redis keys.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// The first 64 bits, for picking a shard or a slot.
    pub fn low64(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({})", self.to_hex())
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Hashes key material under a secret. Every instance that shares a store must use the same
/// secret; a single process with none configured draws a random one ([`KeyHasher::random`]).
///
/// ```
/// use sluice_store::KeyHasher;
/// let h = KeyHasher::from_secret(b"shared secret");
/// let a = h.hash(&[b"ip", b"203.0.113.7"]);
/// assert_eq!(a, KeyHasher::from_secret(b"shared secret").hash(&[b"ip", b"203.0.113.7"]));
/// assert_ne!(a, KeyHasher::from_secret(b"another").hash(&[b"ip", b"203.0.113.7"]));
/// // Part boundaries matter: ("ab", "c") is not ("a", "bc").
/// assert_ne!(h.hash(&[b"ab", b"c"]), h.hash(&[b"a", b"bc"]));
/// ```
#[derive(Clone)]
pub struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(<secret>)")
    }
}

impl KeyHasher {
    /// A hasher keyed by `secret` (any length; it is itself condensed to 128 bits).
    pub fn from_secret(secret: &[u8]) -> Self {
        let mut h = SipHasher24::new_with_keys(0x736c_7569_6365_2d6b, 0x6579_2d64_6572_6976);
        h.write(secret);
        let k = h.finish128();
        Self { k0: k.h1, k1: k.h2 }
    }

    /// A hasher with a random secret: right for one process whose keys are not shared.
    pub fn random() -> Self {
        Self { k0: rand::random(), k1: rand::random() }
    }

    /// Hashes the parts of a key; each part is length-prefixed so boundaries cannot be shifted.
    pub fn hash(&self, parts: &[&[u8]]) -> KeyHash {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        for p in parts {
            h.write_u64(p.len() as u64);
            h.write(p);
        }
        KeyHash(h.finish128().as_bytes())
    }
}

/// True for a name a shared store puts into its keys verbatim (a Redis key prefix, a policy
/// name): 1 to 128 ASCII letters, digits and `-_./`. Braces would move a Redis Cluster hash tag,
/// and spaces or colons make keys that tools misread. Checked by the configuration's validator
/// (so `check-config` refuses what the store would) and by the Redis store.
///
/// ```
/// use sluice_store::is_key_name;
/// assert!(is_key_name("sluice") && is_key_name("per-ip_v2.1/eu"));
/// assert!(!is_key_name("") && !is_key_name("a:b") && !is_key_name("{tag}") && !is_key_name("naïve"));
/// ```
pub fn is_key_name(value: &str) -> bool {
    !value.is_empty() && value.len() <= 128 && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}
