//! What the fault tests of the binary share: a `sluice serve --config` child whose every output
//! line is kept, a keep-alive HTTP client, an upstream that takes its time, and a steady load of
//! client threads that records every answer.

#![allow(dead_code)] // each test binary uses part of this module

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The binary under test.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// How long a test waits for anything before failing instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Every line a child wrote, stdout and stderr alike, in arrival order.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn follow(&self, from: impl Read + Send + 'static) {
        let lines = self.clone();
        thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                lines.0.lock().unwrap().push(line);
            }
        });
    }

    /// How many lines contain `needle` so far.
    pub fn count(&self, needle: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
    }

    /// Waits until `n` lines contain `needle`; returns the `n`-th.
    pub fn wait_for_nth(&self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(line) = self.0.lock().unwrap().iter().filter(|l| l.contains(needle)).nth(n - 1) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no line {n} with {needle:?} in:\n{}", self.all());
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a line containing `needle`.
    pub fn wait_for(&self, needle: &str) -> String {
        self.wait_for_nth(needle, 1)
    }

    /// Everything so far, for failure messages.
    pub fn all(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

/// A `sluice serve --config` child, killed when dropped unless it already exited.
pub struct Gateway {
    child: Child,
    /// Where it serves clients.
    pub addr: SocketAddr,
    /// What it wrote.
    pub lines: Lines,
}

impl Gateway {
    /// Starts `sluice serve --config PATH ARGS` and waits until it says where it listens.
    pub fn start(config: &str, args: &[&str]) -> Self {
        let mut child = Command::new(SLUICE)
            .args(["serve", "--config", config])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the sluice binary starts");
        let lines = Lines::default();
        lines.follow(child.stdout.take().unwrap());
        lines.follow(child.stderr.take().unwrap());
        let deadline = Instant::now() + PATIENCE;
        let addr = loop {
            let found = lines.0.lock().unwrap().iter().find_map(|l| {
                let at = l.split("listening on http://").nth(1)?.split(' ').next()?;
                at.parse::<SocketAddr>().ok()
            });
            if let Some(addr) = found {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("sluice exited at start ({status}):\n{}", lines.all());
            }
            assert!(Instant::now() < deadline, "sluice never said where it listens:\n{}", lines.all());
            thread::sleep(Duration::from_millis(10));
        };
        Self { child, addr, lines }
    }

    /// Sends the process a signal (`TERM`, `HUP`, ...).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args([&format!("-{name}"), &pid]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} {pid} failed");
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "sluice did not exit:\n{}", self.lines.all());
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, and the exit status once it drained.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An answer: the status and the headers (names lower-cased).
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: BTreeMap<String, String>,
}

impl Answer {
    /// A header, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// A header as a number.
    pub fn number(&self, name: &str) -> Option<u64> {
        self.header(name)?.parse().ok()
    }
}

/// One HTTP/1.1 connection kept alive across requests.
pub struct KeepAlive {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The server said it closes the connection after the last answer.
    pub closing: bool,
}

impl KeepAlive {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(PATIENCE))?;
        s.set_nodelay(true)?;
        Ok(Self { reader: BufReader::new(s.try_clone()?), writer: s, closing: false })
    }

    /// `GET path` with `X-User: user`, its answer read to the end of its body.
    pub fn get(&mut self, path: &str, user: &str) -> std::io::Result<Answer> {
        write!(self.writer, "GET {path} HTTP/1.1\r\nHost: sluice.test\r\nX-User: {user}\r\n\r\n")?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before an answer"));
        }
        let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad(&line))?;
        let mut headers = BTreeMap::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').ok_or_else(|| bad(l))?;
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body)?;
        self.closing = headers.get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        Ok(Answer { status, headers })
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not HTTP: {what:?}"))
}

/// An upstream that answers `200` after `delay`, on keep-alive connections, counting what
/// reached it and what it answered. Its threads live as long as the test process.
pub struct SlowUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests read.
    pub arrived: Arc<AtomicU64>,
    /// Answers written.
    pub answered: Arc<AtomicU64>,
    /// The `X-User` of each request read, in arrival order: a test that holds requests
    /// of its own waits for those, not for a count the background load also moves.
    pub users: Arc<Mutex<Vec<String>>>,
}

impl SlowUpstream {
    /// Starts it.
    pub fn start(delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (arrived, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let users = Arc::new(Mutex::new(Vec::new()));
        let (a, b, u) = (arrived.clone(), answered.clone(), users.clone());
        thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let (a, b, u) = (a.clone(), b.clone(), u.clone());
                thread::spawn(move || answer_slowly(conn, delay, &a, &b, &u));
            }
        });
        Self { addr, arrived, answered, users }
    }

    /// Whether a request from `user` has arrived.
    pub fn has_seen(&self, user: &str) -> bool {
        self.users.lock().unwrap().iter().any(|u| u == user)
    }
}

fn answer_slowly(
    conn: TcpStream,
    delay: Duration,
    arrived: &AtomicU64,
    answered: &AtomicU64,
    users: &Mutex<Vec<String>>,
) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        // The requests sluice forwards here are GETs without a body.
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("x-user")
            {
                users.lock().unwrap().push(value.trim().to_string());
            }
        }
        arrived.fetch_add(1, Ordering::SeqCst);
        thread::sleep(delay);
        if writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
        answered.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a load saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Answers by status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests admitted, by path and user.
    pub admitted: BTreeMap<(String, String), u64>,
    /// Requests that got no answer, with why.
    pub failures: Vec<String>,
    /// The slowest answer.
    pub worst: Duration,
}

/// Client threads, each on its own keep-alive connection (a new one when the server closes it),
/// sending `GET` to each of `paths` in turn as user `u<thread>` until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Tally>>,
    /// Answers so far, over all threads.
    pub answers: Arc<AtomicU64>,
}

impl Load {
    /// Starts `threads` clients against `addr`.
    pub fn start(addr: SocketAddr, threads: usize, paths: &[&str]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(AtomicU64::new(0));
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let threads = (0..threads)
            .map(|t| {
                let (stop, answers, paths) = (stop.clone(), answers.clone(), paths.clone());
                thread::spawn(move || client(addr, &format!("u{t}"), &paths, &stop, &answers))
            })
            .collect();
        Self { stop, threads, answers }
    }

    /// Waits until `n` more answers have come (the load is flowing).
    pub fn wait_answers(&self, n: u64) {
        let target = self.answers.load(Ordering::SeqCst) + n;
        let deadline = Instant::now() + PATIENCE;
        while self.answers.load(Ordering::SeqCst) < target {
            assert!(Instant::now() < deadline, "the load stalled");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the clients and adds up what they saw.
    pub fn finish(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Tally::default();
        for t in self.threads {
            let one = t.join().unwrap();
            for (s, n) in one.statuses {
                *all.statuses.entry(s).or_default() += n;
            }
            for (k, n) in one.admitted {
                *all.admitted.entry(k).or_default() += n;
            }
            all.failures.extend(one.failures);
            all.worst = all.worst.max(one.worst);
        }
        all
    }
}

fn client(addr: SocketAddr, user: &str, paths: &[String], stop: &AtomicBool, answers: &AtomicU64) -> Tally {
    let mut tally = Tally::default();
    let mut conn: Option<KeepAlive> = None;
    for path in paths.iter().cycle() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match KeepAlive::connect(addr) {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    tally.failures.push(format!("connect: {e}"));
                    break;
                }
            },
        };
        let asked = Instant::now();
        match c.get(path, user) {
            Ok(a) => {
                tally.worst = tally.worst.max(asked.elapsed());
                *tally.statuses.entry(a.status).or_default() += 1;
                if a.status == 200 {
                    *tally.admitted.entry((path.clone(), user.to_string())).or_default() += 1;
                }
                answers.fetch_add(1, Ordering::SeqCst);
                if c.closing {
                    conn = None;
                }
            }
            Err(e) => {
                tally.failures.push(format!("{path}: {e}"));
                conn = None;
            }
        }
    }
    tally
}
