//! A response body, cut out of the bytes read from the upstream as its framing says.

use bytes::{Buf, Bytes, BytesMut};

use super::response_head::Framing;

/// The longest chunk-size line (size and extensions) read; a longer one is an error.
pub const MAX_CHUNK_LINE: usize = 4096;

/// The most bytes of trailer fields read after the last chunk (they are not passed on).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Where a body's decoding stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoder {
    /// This many bytes left of a `Content-Length` body.
    Length(u64),
    /// Inside a chunked body.
    Chunked(Chunk),
    /// Everything until the upstream closes.
    UntilClose,
    /// The body has ended.
    Done,
}

/// Where a chunked body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// This many bytes left of a chunk's data.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: the trailer fields (this many bytes of them read so far), up to a
    /// blank line.
    Trailers(usize),
}

/// What [`Decoder::step`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Bytes of the body.
    Data(Bytes),
    /// The body has ended; what is left in the buffer is not part of it.
    End,
    /// The buffer holds no more of the body: read more.
    More,
}

/// Why a body cannot be read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The connection ended before the body did.
    #[error("the upstream closed the connection inside a response body")]
    Truncated,
    /// The chunked framing is broken, or a bound was passed.
    #[error("the upstream's chunked response body is malformed")]
    Malformed,
}

impl Decoder {
    /// The decoder of a body framed as `framing`.
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Empty | Framing::Length(0) => Self::Done,
            Framing::Length(n) => Self::Length(n),
            Framing::Chunked => Self::Chunked(Chunk::Size),
            Framing::UntilClose => Self::UntilClose,
        }
    }

    /// True once the body has ended.
    pub fn is_done(&self) -> bool {
        *self == Self::Done
    }

    /// The body's length left, when it is known.
    pub fn exact_left(&self) -> Option<u64> {
        match self {
            Self::Length(n) => Some(*n),
            Self::Done => Some(0),
            _ => None,
        }
    }

    /// Takes the next piece of the body off `buf`. `closed`: the upstream has closed the
    /// connection, so `buf` is all there will be.
    ///
    /// ```
    /// use bytes::BytesMut;
    /// use sluice_upstream::h1::body_decoder::{Decoder, Step};
    /// use sluice_upstream::h1::response_head::Framing;
    /// let mut d = Decoder::new(Framing::Chunked);
    /// let mut buf = BytesMut::from(&b"3\r\nabc\r\n0\r\n\r\nnext"[..]);
    /// assert_eq!(d.step(&mut buf, false), Ok(Step::Data("abc".into())));
    /// assert_eq!(d.step(&mut buf, false), Ok(Step::End));
    /// assert_eq!(&buf[..], b"next");
    /// ```
    pub fn step(&mut self, buf: &mut BytesMut, closed: bool) -> Result<Step, FramingError> {
        loop {
            match self {
                Self::Done => return Ok(Step::End),
                Self::UntilClose if !buf.is_empty() => return Ok(Step::Data(buf.split().freeze())),
                Self::UntilClose if closed => *self = Self::Done,
                Self::UntilClose => return Ok(Step::More),
                Self::Length(left) => {
                    let Some(data) = take(buf, left) else { return more(closed) };
                    if *left == 0 {
                        *self = Self::Done;
                    }
                    return Ok(Step::Data(data));
                }
                Self::Chunked(Chunk::Data(left)) => {
                    let Some(data) = take(buf, left) else { return more(closed) };
                    if *left == 0 {
                        *self = Self::Chunked(Chunk::DataEnd);
                    }
                    return Ok(Step::Data(data));
                }
                // A size line starts with a hex digit (httparse would read an empty line as the
                // last chunk) and holds no bare line feed in its extensions.
                Self::Chunked(Chunk::Size) if buf.first().is_some_and(|b| !b.is_ascii_hexdigit()) => {
                    return Err(FramingError::Malformed);
                }
                Self::Chunked(Chunk::Size) => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((line, size))) => {
                        if buf[..line - 2].contains(&b'\n') {
                            return Err(FramingError::Malformed);
                        }
                        buf.advance(line);
                        *self = Self::Chunked(if size == 0 { Chunk::Trailers(0) } else { Chunk::Data(size) });
                    }
                    Ok(httparse::Status::Partial) if buf.len() >= MAX_CHUNK_LINE => {
                        return Err(FramingError::Malformed);
                    }
                    Ok(httparse::Status::Partial) => return more(closed),
                    Err(_) => return Err(FramingError::Malformed),
                },
                Self::Chunked(Chunk::DataEnd) => match buf.get(..2) {
                    Some(b"\r\n") => {
                        buf.advance(2);
                        *self = Self::Chunked(Chunk::Size);
                    }
                    Some(_) => return Err(FramingError::Malformed),
                    None if buf.first().is_some_and(|&b| b != b'\r') => return Err(FramingError::Malformed),
                    None => return more(closed),
                },
                Self::Chunked(Chunk::Trailers(read)) => {
                    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                        if *read + buf.len() > MAX_TRAILERS {
                            return Err(FramingError::Malformed);
                        }
                        return more(closed);
                    };
                    if end == 0 || buf[end - 1] != b'\r' || (end > 1 && !is_field_line(&buf[..end - 1])) {
                        return Err(FramingError::Malformed);
                    }
                    *read += end + 1;
                    if *read > MAX_TRAILERS {
                        return Err(FramingError::Malformed);
                    }
                    buf.advance(end + 1);
                    // The blank line ends the trailers and the body.
                    if end == 1 {
                        *self = Self::Done;
                    }
                }
            }
        }
    }
}

/// Up to `*left` bytes off the front of `buf` (`None` when it is empty), counted off `left`.
fn take(buf: &mut BytesMut, left: &mut u64) -> Option<Bytes> {
    if buf.is_empty() {
        return None;
    }
    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
    *left -= n as u64;
    Some(buf.split_to(n).freeze())
}

/// True when `line` (without its CRLF) is a field: a token, a colon, a value without line breaks.
/// A trailer section that holds anything else is not one (bytes of a body, misframed).
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else { return false };
    let is_tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    colon > 0 && line[..colon].iter().all(is_tchar) && !line[colon..].iter().any(|&b| b == b'\r' || b == b'\n')
}

/// The buffer ran out inside the body: more to read, unless the upstream has closed.
fn more(closed: bool) -> Result<Step, FramingError> {
    if closed { Err(FramingError::Truncated) } else { Ok(Step::More) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole body of `wire` fed in pieces of `piece` bytes, and what follows its end (read or
    /// not yet).
    fn decode(
        framing: Framing,
        wire: &[u8],
        piece: usize,
        close_at_end: bool,
    ) -> Result<(Vec<u8>, Vec<u8>), FramingError> {
        let mut d = Decoder::new(framing);
        let (mut buf, mut body, mut fed) = (BytesMut::new(), Vec::new(), 0);
        loop {
            let closed = close_at_end && fed == wire.len();
            match d.step(&mut buf, closed)? {
                Step::Data(b) => {
                    assert!(!b.is_empty(), "no empty frames");
                    body.extend_from_slice(&b);
                }
                Step::End => return Ok((body, [&buf[..], &wire[fed..]].concat())),
                Step::More => {
                    assert!(fed < wire.len() || !close_at_end, "More after the close");
                    if fed == wire.len() {
                        return Err(FramingError::Truncated);
                    }
                    let n = piece.min(wire.len() - fed);
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn every_framing_decodes_in_pieces_of_any_size() {
        let chunked = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-T: 1\r\n\r\nHTTP/1.1";
        for piece in 1..=chunked.len() {
            assert_eq!(
                decode(Framing::Chunked, chunked, piece, false),
                Ok((b"hello world".to_vec(), b"HTTP/1.1".to_vec()))
            );
            assert_eq!(
                decode(Framing::Length(5), b"hellorest", piece, false),
                Ok((b"hello".to_vec(), b"rest".to_vec()))
            );
            assert_eq!(decode(Framing::UntilClose, b"all of it", piece, true), Ok((b"all of it".to_vec(), vec![])));
        }
        let mut buf = BytesMut::from(&b"next"[..]);
        assert_eq!(Decoder::new(Framing::Empty).step(&mut buf, false), Ok(Step::End));
        assert_eq!(&buf[..], b"next", "what follows is not part of an empty body");
    }

    #[test]
    fn a_body_cut_short_is_an_error_never_an_end() {
        for (framing, wire) in [
            (Framing::Length(10), &b"short"[..]),
            (Framing::Chunked, b"5\r\nhel"),
            (Framing::Chunked, b"5\r\nhello\r\n"),
            (Framing::Chunked, b"5\r\nhello\r"),
            (Framing::Chunked, b"0\r\n"),
            (Framing::Chunked, b"0\r\nX-T: 1\r\n"),
            (Framing::Chunked, b""),
        ] {
            assert_eq!(
                decode(framing, wire, 3, true).map(|_| ()),
                Err(FramingError::Truncated),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn broken_chunks_and_endless_lines_are_refused() {
        let endless_ext = format!("5;{}", "e".repeat(MAX_CHUNK_LINE));
        let endless_trailer = format!("0\r\nX: {}", "t".repeat(MAX_TRAILERS));
        let many_trailers = format!("0\r\n{}\r\n", "X: 1\r\n".repeat(MAX_TRAILERS / 6 + 1));
        for wire in [
            // An empty size line is not the last chunk: "world" is a chunk, not a trailer.
            &b"5\r\nhello\r\n\r\n5\r\nworld\r\n0\r\n\r\n"[..],
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"0\r\nnot a field\r\n\r\n",
            b"0\r\n: no name\r\n\r\n",
            b"5\r\nhelloXX",
            b"z\r\n",
            b"-1\r\n",
            b"5\nhello\r\n",
            b"10000000000000000\r\n",
            b"0\r\nX: 1\n\r\n",
            endless_ext.as_bytes(),
            endless_trailer.as_bytes(),
            many_trailers.as_bytes(),
        ] {
            assert_eq!(
                decode(Framing::Chunked, wire, 7, false).map(|_| ()),
                Err(FramingError::Malformed),
                "{:?}",
                String::from_utf8_lossy(&wire[..wire.len().min(40)])
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

        /// A body chunked any way, fed in pieces of any size, comes out whole, and what follows
        /// its end stays in the buffer.
        #[test]
        fn chunked_bodies_come_out_whole(chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..40), 0..8),
                                         piece in 1usize..64, upper: bool, follow in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8)) {
            let mut wire = Vec::new();
            for c in &chunks {
                let size = if upper { format!("{:X}", c.len()) } else { format!("{:x}", c.len()) };
                wire.extend_from_slice(size.as_bytes());
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            wire.extend_from_slice(&follow);
            let (body, left) = decode(Framing::Chunked, &wire, piece, false).unwrap();
            proptest::prop_assert_eq!(body, chunks.concat());
            proptest::prop_assert_eq!(left, follow);
        }

        /// Any bytes as a chunked body: never a panic, never more data out than came in, and an
        /// end only where the bytes held one.
        #[test]
        fn any_bytes_as_chunks_never_panic(wire in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), piece in 1usize..32, closed: bool) {
            if let Ok((body, left)) = decode(Framing::Chunked, &wire, piece, closed) {
                proptest::prop_assert!(body.len() + left.len() < wire.len() || wire.is_empty());
            }
        }
    }
}
