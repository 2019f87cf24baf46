//! Numbers written as decimal digits without formatting machinery: what every header value and
//! every RESP length sluice writes is made of, once per response or store call.

/// `n` in decimal, written at the end of `buf`: the digits' part of it.
///
/// ```
/// let mut buf = [0u8; 20];
/// assert_eq!(sluice_core::decimal(0, &mut buf), b"0");
/// assert_eq!(sluice_core::decimal(1024, &mut buf), b"1024");
/// assert_eq!(sluice_core::decimal(u64::MAX, &mut buf), u64::MAX.to_string().as_bytes());
/// ```
pub fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    let mut left = n;
    loop {
        at -= 1;
        buf[at] = b'0' + (left % 10) as u8;
        left /= 10;
        if left == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_digits_are_those_rust_formats(n: u64) {
            let mut buf = [0u8; 20];
            let written = n.to_string();
            prop_assert_eq!(super::decimal(n, &mut buf), written.as_bytes());
        }
    }
}
