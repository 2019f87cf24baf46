//! The snapshot file as a stream: every byte written or read goes through the checksum, so a
//! file is written and checked in one pass with no copy of it in memory.

use std::hash::Hasher;
use std::io::{self, Read, Write};

use siphasher::sip128::{Hasher128, SipHasher24};

use super::SnapshotError;

/// Writes through the checksum; [`Sink::finish`] appends it.
pub(crate) struct Sink<W: Write> {
    /// Where the bytes go.
    inner: W,
    /// The checksum of everything written so far.
    mac: SipHasher24,
    /// Bytes written, the checksum included once finished.
    written: u64,
}

impl<W: Write> Sink<W> {
    pub(crate) fn new(inner: W, mac: SipHasher24) -> Self {
        Self { inner, mac, written: 0 }
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.mac.write(b);
        self.written += b.len() as u64;
        self.inner.write_all(b)
    }

    pub(crate) fn u8(&mut self, v: u8) -> io::Result<()> {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> io::Result<()> {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends the checksum; returns the writer and the file's length.
    pub(crate) fn finish(mut self) -> io::Result<(W, u64)> {
        let tag = self.mac.finish128().as_bytes();
        self.inner.write_all(&tag)?;
        Ok((self.inner, self.written + tag.len() as u64))
    }
}

/// Reads through the checksum, in pieces of at most [`Source::MAX_PIECE`] bytes.
pub(crate) struct Source<R: Read> {
    /// Where the bytes come from.
    inner: R,
    /// The checksum of everything read so far.
    mac: SipHasher24,
    /// The last piece read.
    piece: Vec<u8>,
}

impl<R: Read> Source<R> {
    /// The largest piece read at once: a name, a cell.
    pub(crate) const MAX_PIECE: usize = 1024;

    pub(crate) fn new(inner: R, mac: SipHasher24) -> Self {
        Self { inner, mac, piece: Vec::with_capacity(64) }
    }

    /// The next `n` bytes (at most [`Source::MAX_PIECE`]).
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&[u8], SnapshotError> {
        if n > Self::MAX_PIECE {
            return Err(SnapshotError::Corrupt("a field longer than any the writer writes"));
        }
        self.piece.resize(n, 0);
        read_exact(&mut self.inner, &mut self.piece)?;
        self.mac.write(&self.piece);
        Ok(&self.piece)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, SnapshotError> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, SnapshotError> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, SnapshotError> {
        self.array().map(u64::from_le_bytes)
    }

    pub(crate) fn key(&mut self) -> Result<[u8; 16], SnapshotError> {
        self.array()
    }

    /// Reads the checksum and checks it, and that nothing follows it.
    pub(crate) fn finish(mut self) -> Result<(), SnapshotError> {
        let mut tag = [0u8; 16];
        read_exact(&mut self.inner, &mut tag)?;
        let expected = self.mac.finish128().as_bytes();
        // Compared in full whatever differs first.
        if tag.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
            return Err(SnapshotError::Checksum);
        }
        let mut more = [0u8; 1];
        match self.inner.read(&mut more) {
            Ok(0) => Ok(()),
            Ok(_) => Err(SnapshotError::Corrupt("bytes after the checksum")),
            Err(e) => Err(SnapshotError::Io(e)),
        }
    }
}

fn read_exact(from: &mut impl Read, into: &mut [u8]) -> Result<(), SnapshotError> {
    from.read_exact(into).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => SnapshotError::Truncated,
        _ => SnapshotError::Io(e),
    })
}
