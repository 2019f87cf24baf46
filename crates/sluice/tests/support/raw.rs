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

    /// The `r` (remaining) of `policy` in the ietf `RateLimit` field
    /// (`"per-account";r=2;t=900, "per-ip";r=7;t=20`).
    pub fn remaining_of(&self, policy: &str) -> u64 {
        let field = self.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit field: {:?}", self.headers));
        let item = field
            .split(',')
            .map(str::trim)
            .find(|i| i.starts_with(&format!("\"{policy}\"")))
            .unwrap_or_else(|| panic!("{policy} is not in {field}"));
        let r = item.split(';').find_map(|p| p.strip_prefix("r=")).expect("an r parameter");
        r.parse().expect("r is a number")
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
    /// The body, de-chunked (as much of it as came, for one still arriving or cut).
    pub body: Vec<u8>,
    /// The connection it came on: 1 for the first the upstream accepted, and so on.
    pub conn: usize,
}

impl Seen {
    /// Every value of header `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// What reached a [`Recorder`].
#[derive(Debug, Default)]
pub struct Log {
    /// Requests received whole, in order.
    pub done: Vec<Seen>,
    /// Requests whose head came and whose body is still arriving, by connection.
    pub receiving: HashMap<usize, Seen>,
    /// Requests whose connection ended inside their body: what came of them.
    pub cut: Vec<Seen>,
    /// Connections accepted.
    pub connections: usize,
}

/// An upstream on a free port that answers every request `200 ok` and records it, and the
/// connections it came on.
pub struct Recorder {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What reached it.
    pub log: Arc<Mutex<Log>>,
}

impl Recorder {
    /// Starts it (threads that live as long as the test process).
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = log.clone();
        thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let log = shared.clone();
                let id = {
                    let mut log = log.lock().unwrap();
                    log.connections += 1;
                    log.connections
                };
                thread::spawn(move || serve_connection(conn, id, &log));
            }
        });
        Self { addr, log }
    }

    /// What reached it whole so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.log.lock().unwrap().done.clone()
    }

    /// How many requests reached it whole.
    pub fn count(&self) -> usize {
        self.log.lock().unwrap().done.len()
    }

    /// Requests whose body is arriving now.
    pub fn receiving(&self) -> Vec<Seen> {
        self.log.lock().unwrap().receiving.values().cloned().collect()
    }

    /// Requests whose connection ended inside their body.
    pub fn cut(&self) -> Vec<Seen> {
        self.log.lock().unwrap().cut.clone()
    }

    /// Waits (at most [`WAIT`]) until `what` holds of the log, and returns what it gave.
    pub fn wait_for<T>(&self, why: &str, what: impl Fn(&Log) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(t) = what(&self.log.lock().unwrap()) {
                return t;
            }
            assert!(std::time::Instant::now() < deadline, "the upstream never saw {why}");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Header lines as (lowercased name, value).
pub type Headers = Vec<(String, String)>;

/// A request's head on an upstream's connection: method, target and headers (names lowercased);
/// `None` when the connection ends first.
pub fn read_head(reader: &mut impl BufRead) -> Option<(String, String, Headers)> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut parts = line.trim_end().splitn(3, ' ');
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = Vec::new();
        if reader.read_until(b'\n', &mut h).unwrap_or(0) == 0 {
            return None;
        }
        let h = String::from_utf8_lossy(&h).trim_end().to_string();
        if h.is_empty() {
            return Some((method, path, headers));
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
}

/// Serves connection number `id`: reads requests, their bodies as they arrive (recorded in
/// `receiving`), answers each received whole, and records one cut inside its body.
fn serve_connection(conn: TcpStream, id: usize, log: &Mutex<Log>) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let Some((method, path, headers)) = read_head(&mut reader) else { return };
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let length = get("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        log.lock().unwrap().receiving.insert(id, Seen { method, path, headers, body: Vec::new(), conn: id });
        let arrived = |data: &[u8]| {
            if let Some(seen) = log.lock().unwrap().receiving.get_mut(&id) {
                seen.body.extend_from_slice(data);
            }
        };
        let whole = if chunked { read_chunked(&mut reader, arrived) } else { read_sized(&mut reader, length, arrived) };
        let mut log_now = log.lock().unwrap();
        let Some(seen) = log_now.receiving.remove(&id) else { return };
        if !whole {
            log_now.cut.push(seen);
            return;
        }
        log_now.done.push(seen);
        drop(log_now);
        if writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}

/// Reads a chunked body, handing each chunk's data to `arrived`; false when the connection
/// ended inside it (or its framing broke).
fn read_chunked(reader: &mut BufReader<TcpStream>, arrived: impl Fn(&[u8])) -> bool {
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).unwrap_or(0) == 0 {
            return false;
        }
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { return false };
        let mut chunk = vec![0; n + 2];
        if reader.read_exact(&mut chunk).is_err() {
            return false;
        }
        if n == 0 {
            return true;
        }
        arrived(&chunk[..n]);
    }
}

/// Reads a body of `length` bytes as they come, handing them to `arrived`; false when the
/// connection ended first.
fn read_sized(reader: &mut BufReader<TcpStream>, length: usize, arrived: impl Fn(&[u8])) -> bool {
    let mut left = length;
    let mut buf = vec![0; 8192];
    while left > 0 {
        let want = left.min(buf.len());
        match reader.read(&mut buf[..want]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                arrived(&buf[..n]);
                left -= n;
            }
        }
    }
    true
}

/// The sum of the admin listener's `/metrics` lines that start with `prefix` (0 when none).
pub fn metric_sum(admin: SocketAddr, prefix: &str) -> f64 {
    let text = http(admin, "GET", "/metrics", b"").text();
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// An upstream on a free local port that serves each connection with `answer`, on a thread
/// of its own.
pub fn upstream(answer: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            thread::spawn(move || answer(conn));
        }
    });
    addr
}

/// Sends `request` on a new connection to `addr` and reads until what came back holds `seen`
/// (at most 10 s); the connection, still open, and what came back.
pub fn open_until(addr: SocketAddr, request: &[u8], seen: &str) -> (TcpStream, Vec<u8>) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    while !String::from_utf8_lossy(&got).contains(seen) {
        let n = c.read(&mut buf).unwrap_or_else(|e| panic!("waiting for {seen:?}: {e}"));
        assert!(n > 0, "closed before {seen:?}: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    (c, got)
}
