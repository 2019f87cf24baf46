//! Redis Cluster key slots: CRC16 (XMODEM) of the key's hash tag, modulo 16384.

/// The Cluster slot of `key`, by the Redis rule: if the key holds `{...}` with at least one byte
/// between the first `{` and the next `}`, only those bytes are hashed.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_reference_check_value() {
        // The XMODEM check value given in the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31c3);
    }

    #[test]
    fn hash_tags_follow_the_cluster_rules() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag hashes the whole key; only the first braces count.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
    }
}
