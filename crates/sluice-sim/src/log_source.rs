//! Reading a log line by line in bounded memory: a file, standard input, or either compressed
//! with gzip (told by its magic bytes, not its name; several gzip members one after the other,
//! as `cat a.gz b.gz` makes, are read as one stream).
//!
//! ```
//! use sluice_sim::LogSource;
//! let mut log = LogSource::from_reader(&b"first\r\nsecond"[..], None).unwrap();
//! let line = log.next_line().unwrap().unwrap();
//! assert_eq!((line.number, line.bytes.unwrap()), (1, &b"first"[..]));
//! assert_eq!(log.next_line().unwrap().unwrap().bytes.unwrap(), b"second");
//! assert!(log.next_line().unwrap().is_none());
//! assert_eq!(log.bytes_read(), 13);
//! ```

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::bufread::MultiGzDecoder;

use crate::log_request::LineError;

/// The longest line read; a longer one is skipped to its end and counted as malformed, so a
/// file with no line breaks cannot fill the memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

const BUFFER: usize = 256 * 1024;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Counts the bytes read from the underlying file, compressed or not: the progress of a run.
struct Counted<R> {
    /// The file.
    inner: R,
    /// Bytes read so far, shared with the [`LogSource`].
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// One line of a log.
#[derive(Debug)]
pub struct Line<'a> {
    /// Its number, counting from 1.
    pub number: u64,
    /// Its bytes without the line break, or why they were not kept.
    pub bytes: Result<&'a [u8], LineError>,
}

/// A log being read.
pub struct LogSource {
    /// Lines come from here (decompressed when the file is gzip).
    reader: Box<dyn BufRead>,
    /// Bytes read from the file itself.
    read: Arc<AtomicU64>,
    /// The file's size, when known (a regular file): for the progress bar's estimate.
    size: Option<u64>,
    /// Whether the input is gzip.
    gzip: bool,
    /// Lines read so far.
    lines: u64,
    /// The current line.
    buf: Vec<u8>,
}

impl std::fmt::Debug for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSource")
            .field("size", &self.size)
            .field("gzip", &self.gzip)
            .field("lines", &self.lines)
            .finish()
    }
}

impl LogSource {
    /// Opens `path`; `-` is standard input.
    pub fn open(path: &Path) -> io::Result<Self> {
        if path.as_os_str() == "-" {
            return Self::from_reader(io::stdin().lock(), None);
        }
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Self::from_reader(file, meta.is_file().then_some(meta.len()))
    }

    /// Reads from `reader`, of `size` bytes when known.
    pub fn from_reader(reader: impl Read + 'static, size: Option<u64>) -> io::Result<Self> {
        let read = Arc::new(AtomicU64::new(0));
        let mut raw = BufReader::with_capacity(BUFFER, Counted { inner: reader, read: Arc::clone(&read) });
        let gzip = raw.fill_buf()?.starts_with(&GZIP_MAGIC);
        let reader: Box<dyn BufRead> =
            if gzip { Box::new(BufReader::with_capacity(BUFFER, MultiGzDecoder::new(raw))) } else { Box::new(raw) };
        Ok(Self { reader, read, size, gzip, lines: 0, buf: Vec::with_capacity(1024) })
    }

    /// The next line, or `None` at the end.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let n = (&mut self.reader).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.lines += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if self.buf.len() > MAX_LINE_BYTES {
            // Skip the rest of the line, a bounded piece at a time.
            loop {
                self.buf.clear();
                let n = (&mut self.reader).take(MAX_LINE_BYTES as u64).read_until(b'\n', &mut self.buf)?;
                if n == 0 || self.buf.last() == Some(&b'\n') {
                    break;
                }
            }
            return Ok(Some(Line { number: self.lines, bytes: Err(LineError::TooLong(MAX_LINE_BYTES)) }));
        }
        Ok(Some(Line { number: self.lines, bytes: Ok(&self.buf) }))
    }

    /// Bytes read from the file (compressed bytes for a gzip file).
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// The file's size, when known.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    /// Whether the input is gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        self.gzip
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn lines(mut s: LogSource) -> Vec<(u64, Result<String, LineError>)> {
        let mut out = Vec::new();
        while let Some(l) = s.next_line().unwrap() {
            out.push((l.number, l.bytes.map(|b| String::from_utf8_lossy(b).into_owned())));
        }
        out
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(text).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_is_told_by_its_magic_and_members_are_joined() {
        let mut both = gzip(b"a\nb\n");
        both.extend(gzip(b"c\n"));
        let s = LogSource::from_reader(std::io::Cursor::new(both.clone()), Some(both.len() as u64)).unwrap();
        assert!(s.is_gzip());
        assert_eq!(lines(s), [(1, Ok("a".into())), (2, Ok("b".into())), (3, Ok("c".into()))]);
        let plain = LogSource::from_reader(&b"a\n"[..], None).unwrap();
        assert!(!plain.is_gzip());
    }

    #[test]
    fn overlong_lines_are_skipped_and_numbered() {
        let mut text = vec![b'x'; MAX_LINE_BYTES * 3];
        text.extend_from_slice(b"\nok\n");
        text.extend(vec![b'y'; MAX_LINE_BYTES]);
        text.extend_from_slice(b"\n");
        let got = lines(LogSource::from_reader(std::io::Cursor::new(text), None).unwrap());
        assert_eq!(got[0], (1, Err(LineError::TooLong(MAX_LINE_BYTES))));
        assert_eq!(got[1], (2, Ok("ok".into())));
        assert_eq!(got[2].1.as_ref().map(String::len), Ok(MAX_LINE_BYTES));
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn empty_lines_are_lines() {
        let got = lines(LogSource::from_reader(&b"\n\na"[..], None).unwrap());
        assert_eq!(got, [(1, Ok(String::new())), (2, Ok(String::new())), (3, Ok("a".into()))]);
    }
}
