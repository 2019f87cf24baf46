//! The few RESP2 pieces the single-node path writes and reads itself: the decision script's
//! `EVALSHA` written straight into a connection's buffer, where one reply ends in a stream of
//! bytes, and a reply of integers read without building a value tree.

use std::fmt;

/// The most bytes one reply may take: the decision script's replies are a few hundred bytes;
/// anything near this bound is a broken or hostile server, not a reply.
pub(crate) const MAX_REPLY: usize = 16 << 20;

/// The most elements one reply may announce (nested arrays included).
const MAX_ELEMENTS: u64 = 1 << 20;

/// Bytes that are not a RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed reply from Redis: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// Appends an array header (`*n\r\n`).
pub(crate) fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    decimal(out, n as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends the header of a bulk string of `len` bytes; the bytes and `\r\n` follow.
pub(crate) fn bulk_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'$');
    decimal(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one bulk string.
pub(crate) fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    bulk_header(out, bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends a number as one bulk string.
pub(crate) fn bulk_u64(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    bulk(out, sluice_core::decimal(n, &mut digits));
}

fn decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(sluice_core::decimal(n, &mut digits));
}

/// The line starting at `at` (its type byte excluded) and where the next one starts, or `None`
/// if the line is not complete yet.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, Malformed> {
    let rest = &buf[at..];
    let Some(nl) = rest.iter().position(|&b| b == b'\n') else { return Ok(None) };
    if nl < 2 || rest[nl - 1] != b'\r' {
        return Err(Malformed("a line does not end in CRLF"));
    }
    Ok(Some((&rest[1..nl - 1], at + nl + 1)))
}

/// A RESP integer: an optional `-` and 1 to 19 digits, within `i64`.
fn integer(digits: &[u8]) -> Result<i64, Malformed> {
    let bad = Malformed("not an integer");
    let (negative, body) = match digits.split_first() {
        Some((b'-', body)) => (true, body),
        _ => (false, digits),
    };
    if body.is_empty() || body.len() > 19 || !body.iter().all(u8::is_ascii_digit) {
        return Err(bad);
    }
    let magnitude = body.iter().try_fold(0i128, |n, &d| Some(n * 10 + i128::from(d - b'0')));
    let value = magnitude.map(|m| if negative { -m } else { m });
    value.and_then(|v| i64::try_from(v).ok()).ok_or(bad)
}

/// The length of the first complete reply in `buf`, or `None` if `buf` holds only part of it.
/// Nested arrays are walked by counting the values still due, not by recursion.
pub(crate) fn frame_len(buf: &[u8]) -> Result<Option<usize>, Malformed> {
    let mut at = 0;
    let mut due: u64 = 1;
    while due > 0 {
        if at >= buf.len() {
            return Ok(None);
        }
        let kind = buf[at];
        let Some((text, next)) = line(buf, at)? else { return Ok(None) };
        due -= 1;
        at = next;
        match kind {
            // An integer's digits are checked when it is read ([`integers`]).
            b'+' | b'-' | b':' => {}
            b'$' => match integer(text)? {
                -1 => {}
                n if n < 0 || n as usize > MAX_REPLY => return Err(Malformed("bad bulk length")),
                n => {
                    let end = at + n as usize;
                    if buf.len() < end + 2 {
                        return Ok(None);
                    }
                    if &buf[end..end + 2] != b"\r\n" {
                        return Err(Malformed("a bulk string does not end in CRLF"));
                    }
                    at = end + 2;
                }
            },
            b'*' => match integer(text)? {
                -1 => {}
                n if n < 0 || n as u64 > MAX_ELEMENTS - due => return Err(Malformed("bad array length")),
                n => due += n as u64,
            },
            _ => return Err(Malformed("unknown reply type")),
        }
    }
    Ok(Some(at))
}

/// The integers of a reply that is an array of integers (the decision script's), in order.
/// `frame` must be one complete reply ([`frame_len`]).
pub(crate) fn integers(frame: &[u8]) -> Result<Integers<'_>, Malformed> {
    if frame.first() != Some(&b'*') {
        return Err(Malformed("not an array"));
    }
    let Some((text, next)) = line(frame, 0)? else { return Err(Malformed("truncated")) };
    let left = usize::try_from(integer(text)?).map_err(|_| Malformed("a nil array"))?;
    Ok(Integers { frame, at: next, left })
}

/// The integers of one array reply ([`integers`]).
#[derive(Debug)]
pub(crate) struct Integers<'a> {
    frame: &'a [u8],
    at: usize,
    left: usize,
}

impl Integers<'_> {
    /// How many are left.
    pub fn len(&self) -> usize {
        self.left
    }
}

impl Iterator for Integers<'_> {
    type Item = Result<i64, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.frame.get(self.at) != Some(&b':') {
            self.left = 0;
            return Some(Err(Malformed("an element is not an integer")));
        }
        Some(match line(self.frame, self.at) {
            Ok(Some((text, next))) => {
                self.at = next;
                integer(text)
            }
            Ok(None) => Err(Malformed("truncated")),
            Err(e) => Err(e),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A RESP2 value as a server writes it.
    pub(crate) fn value() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,12}".prop_map(|t| format!("+{t}\r\n").into_bytes()),
            "[A-Z]{1,8} [a-z ]{0,12}".prop_map(|t| format!("-{t}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| {
                let mut out = Vec::new();
                bulk(&mut out, &b);
                out
            }),
            Just(b"$-1\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(|items| {
                let mut out = Vec::new();
                array(&mut out, items.len());
                items.iter().for_each(|i| out.extend_from_slice(i));
                out
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

        /// Whatever a server sends: no panic, and a length only within the bytes.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(Some(n)) = frame_len(&bytes) {
                prop_assert!(n > 0 && n <= bytes.len());
                if let Ok(ints) = integers(&bytes[..n]) {
                    ints.for_each(drop);
                }
            }
            if let Ok(ints) = integers(&bytes) {
                ints.for_each(drop);
            }
        }

        /// A whole reply is found exactly, whatever follows it; every part of it is incomplete,
        /// never a reply; a damaged one is refused or read as some reply within its bytes.
        #[test]
        fn replies_are_framed_exactly(reply in value(), after in value(), flip in any::<(usize, u8)>()) {
            let mut two = reply.clone();
            two.extend_from_slice(&after);
            prop_assert_eq!(frame_len(&two), Ok(Some(reply.len())));
            for cut in 0..reply.len() {
                prop_assert_eq!(frame_len(&reply[..cut]), Ok(None));
            }
            let mut damaged = reply.clone();
            let at = flip.0 % damaged.len();
            damaged[at] ^= flip.1.max(1);
            if let Ok(Some(n)) = frame_len(&damaged) {
                prop_assert!(n <= damaged.len());
            }
        }

        /// A stream of replies reads as the same replies however it arrives: whole, or in pieces
        /// cut anywhere, each reply framed as soon as it is complete.
        #[test]
        fn a_stream_of_replies_reads_the_same_however_cut(
            replies in proptest::collection::vec(value(), 1..8),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
        ) {
            let stream = replies.concat();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
            points.sort_unstable();
            points.push(stream.len());
            let (mut buf, mut read, mut from) = (Vec::new(), Vec::new(), 0);
            for to in points {
                buf.extend_from_slice(&stream[from..to]);
                from = to;
                while let Some(n) = frame_len(&buf).expect("a valid stream") {
                    read.push(buf.drain(..n).collect::<Vec<u8>>());
                }
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(read, replies);
        }

        /// An array of integers reads back as the numbers written, and cut anywhere it is
        /// incomplete or, read as a whole anyway, an error.
        #[test]
        fn integer_arrays_read_back(numbers in proptest::collection::vec(any::<i64>(), 0..20)) {
            let mut frame = Vec::new();
            array(&mut frame, numbers.len());
            for n in &numbers {
                frame.extend_from_slice(format!(":{n}\r\n").as_bytes());
            }
            let read: Result<Vec<i64>, Malformed> = integers(&frame).unwrap().collect();
            prop_assert_eq!(read, Ok(numbers.clone()));
            for cut in 0..frame.len() {
                prop_assert_eq!(frame_len(&frame[..cut]), Ok(None));
                let whole: Result<Vec<i64>, Malformed> = integers(&frame[..cut]).and_then(|i| i.collect());
                prop_assert!(whole.is_err() || numbers.is_empty() && cut >= 4, "cut at {}", cut);
            }
        }
    }

    #[test]
    fn writes_what_redis_reads() {
        let mut out = Vec::new();
        array(&mut out, 3);
        bulk(&mut out, b"GET");
        bulk(&mut out, b"");
        bulk_u64(&mut out, 1_000_000);
        assert_eq!(out, b"*3\r\n$3\r\nGET\r\n$0\r\n\r\n$7\r\n1000000\r\n");
        let mut zero = Vec::new();
        bulk_u64(&mut zero, 0);
        bulk_u64(&mut zero, u64::MAX);
        assert_eq!(zero, b"$1\r\n0\r\n$20\r\n18446744073709551615\r\n");
    }

    #[test]
    fn finds_where_each_kind_of_reply_ends() {
        let replies: [&[u8]; 8] = [
            b"+OK\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b":-42\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n+b\r\n$-1\r\n",
        ];
        for r in replies {
            let mut two = r.to_vec();
            two.extend_from_slice(b":7\r\n");
            assert_eq!(frame_len(&two), Ok(Some(r.len())), "{}", String::from_utf8_lossy(r));
            for cut in 0..r.len() {
                assert_eq!(frame_len(&r[..cut]), Ok(None), "{} cut at {cut}", String::from_utf8_lossy(r));
            }
        }
    }

    #[test]
    fn refuses_what_is_not_resp() {
        for bad in [&b"?x\r\n"[..], b"+a\nb", b"$-2\r\n", b"*-5\r\n", b"$1\r\nab\r\n", b"$\r\n", b"*x\r\n"] {
            assert!(frame_len(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(frame_len(b"*1048577\r\n").is_err(), "too many elements");
        // An integer's digits are checked where it is read.
        for bad in [&b"*1\r\n:1x\r\n"[..], b"*1\r\n:\r\n", b"*1\r\n:99999999999999999999\r\n", b"*1\r\n:-\r\n"] {
            assert_eq!(frame_len(bad), Ok(Some(bad.len())));
            assert!(integers(bad).unwrap().any(|n| n.is_err()), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn reads_an_array_of_integers() {
        let frame = b"*3\r\n:1\r\n:0\r\n:-9223372036854775808\r\n";
        let ints = integers(frame).unwrap();
        assert_eq!(ints.len(), 3);
        assert_eq!(ints.collect::<Result<Vec<_>, _>>(), Ok(vec![1, 0, i64::MIN]));
        let mixed = integers(b"*2\r\n:1\r\n$1\r\n2\r\n").unwrap().collect::<Result<Vec<_>, _>>();
        assert_eq!(mixed, Err(Malformed("an element is not an integer")));
        assert!(integers(b":1\r\n").is_err());
        assert!(integers(b"*-1\r\n").is_err());
    }
}
