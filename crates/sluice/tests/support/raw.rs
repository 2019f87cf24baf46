//! HTTP at the byte level, for tests that must send what a well-behaved client would not
//! (odd paths, repeated headers, chunked GETs, trickled bodies), and an upstream that records
//! exactly what reached it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How long a test waits for an answer before failing instead of hanging.
pub const WAIT: Duration = Duration::from_secs(20);

/// A response read to its end.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased (the last line of a repeated one).
    pub headers: HashMap<String, String>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Resp {
    /// A header, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to the end.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    send(addr, &raw)
}

/// Sends `request` (whole bytes, which should ask `Connection: close`) on a fresh connection and
/// reads the response to the end.
pub fn send(addr: SocketAddr, request: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("response within the timeout");
    parse_response(&raw)
}

/// A request of `method` to `path` with `headers` (raw lines, in order) and `body` sent with
/// its length, asking the connection be closed.
pub fn request(method: &str, path: &str, headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n").into_bytes();
    for (k, v) in headers {
        raw.extend_from_slice(k.as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(v);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    raw.extend_from_slice(body);
    raw
}

/// Parses a whole HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Resp {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| {
        panic!("no complete response head: {:?}", String::from_utf8_lossy(raw));
    });
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let mut headers = HashMap::new();
    for line in lines {
        let (k, v) = line.split_once(':').expect("header line");
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let mut body = raw[split + 4..].to_vec();
    if headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

/// The data of a chunked body.
pub fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&data[..eol]).unwrap().trim(), 16).expect("chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Method.
    pub method: String,
    /// Request target.
    pub path: String,
    /// Header lines, names lower-cased, in order (repeated ones repeated).
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Seen {
    /// Every value of header `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// An upstream on a free port that answers every request `200 ok` and records it.
pub struct Recorder {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What reached it, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    /// Starts it (threads that live as long as the test process).
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let log = log.clone();
                thread::spawn(move || serve_connection(conn, &log));
            }
        });
        Self { addr, seen }
    }

    /// What reached it so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// How many requests reached it.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn serve_connection(conn: TcpStream, log: &Mutex<Vec<Seen>>) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = Vec::new();
            if reader.read_until(b'\n', &mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = String::from_utf8_lossy(&h).trim_end().to_string();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                let mut chunk = vec![0; n + 2];
                reader.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body = vec![0; n];
            reader.read_exact(&mut body).unwrap();
        }
        log.lock().unwrap().push(Seen { method, path, headers, body });
        if writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}
