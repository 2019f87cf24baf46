//! HTTP/2 written frame by frame over a plain socket (prior knowledge, h2c): what an attacker
//! sends that a well-behaved client library will not (a stream reset as soon as it is opened,
//! headers continued without end, a host named twice), and just enough reading to see what the
//! server answered.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;

/// One frame as read.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// A frame's bytes: the 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `n`-bit prefix, the prefix's other bits `first`.
fn integer(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// `fields` as an HPACK block of literals without indexing, names and values not Huffman-coded:
/// the plainest encoding every decoder reads.
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        integer(&mut out, 0, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        integer(&mut out, 0, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// The fields of a GET of `path` at `authority` over h2c.
pub fn get<'a>(authority: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![(":method", "GET"), (":scheme", "http"), (":authority", authority), (":path", path)]
}

/// A client connection: the preface and an empty SETTINGS frame already sent.
pub struct Conn {
    pub socket: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Self {
        let mut socket = TcpStream::connect(addr).expect("connect");
        socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        socket.write_all(PREFACE).unwrap();
        socket.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        Self { socket, buf: Vec::new() }
    }

    /// Sends `bytes` (frames); an error when the server has closed the connection.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.socket.write_all(bytes)
    }

    /// A request on `stream` with `fields`, in one HEADERS frame that ends the stream.
    pub fn request(&mut self, stream: u32, fields: &[(&str, &str)]) -> std::io::Result<()> {
        self.send(&frame(HEADERS, END_HEADERS | END_STREAM, stream, &block(fields)))
    }

    /// The next frame; `None` when the server closed the connection (or reset it).
    pub fn next(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16) | (usize::from(self.buf[1]) << 8) | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9 + len).collect();
                    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    return Some(Frame { kind: head[3], flags: head[4], stream, payload: head[9..].to_vec() });
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.socket.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Frames until one of `kind` on `stream` (answering the server's SETTINGS and PINGs), or
    /// `None` if the connection ends first.
    pub fn until(&mut self, kind: u8, stream: u32) -> Option<Frame> {
        while let Some(f) = self.next() {
            if f.kind == SETTINGS && f.flags & ACK == 0 {
                let _ = self.send(&frame(SETTINGS, ACK, 0, &[]));
            }
            if f.kind == PING && f.flags & ACK == 0 {
                let _ = self.send(&frame(PING, ACK, 0, &f.payload));
            }
            if f.kind == kind && (f.stream == stream || kind == GOAWAY) {
                return Some(f);
            }
        }
        None
    }

    /// The status of the response on `stream`, where the server wrote it as an entry of HPACK's
    /// static table (200, 204, 206, 304, 400, 404, 500: its first byte); `Some(0)` for another
    /// status, `None` when no response came.
    pub fn status(&mut self, stream: u32) -> Option<u16> {
        let f = self.until(HEADERS, stream)?;
        Some(match f.payload.first() {
            Some(0x88) => 200,
            Some(0x89) => 204,
            Some(0x8a) => 206,
            Some(0x8b) => 304,
            Some(0x8c) => 400,
            Some(0x8d) => 404,
            Some(0x8e) => 500,
            _ => 0,
        })
    }
}

/// The server's SETTINGS (identifier, value), read from a new connection to `addr`.
pub fn server_settings(addr: SocketAddr) -> Vec<(u16, u32)> {
    let mut c = Conn::open(addr);
    let f = c.until(SETTINGS, 0).expect("the server's SETTINGS");
    f.payload
        .chunks_exact(6)
        .map(|p| (u16::from_be_bytes([p[0], p[1]]), u32::from_be_bytes([p[2], p[3], p[4], p[5]])))
        .collect()
}
