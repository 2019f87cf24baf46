//! Real Redis servers for the tests: each started on a free port in its own temporary directory,
//! without persistence, and killed when its guard drops.

#![allow(dead_code)] // each test binary uses part of this module

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const INSTALL: &str = "install redis-server (apt-get install redis-server)";

fn require(binary: &str) {
    match Command::new(binary).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => {}
        Err(e) => panic!("{binary} is needed by this test and could not be run ({e}): {INSTALL}"),
    }
}

fn temp_dir() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "sluice-redis-test-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// A port nobody listens on now (and, for a Cluster node, its bus port `port + 10000` too).
fn free_port(with_bus: bool) -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().expect("local address").port();
        if !with_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port found")
}

/// Sends one inline command and returns the raw reply, or None if the server does not answer.
fn raw(port: u16, command: &str, wait: Duration) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), wait).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// One `redis-server` process.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        Self::start_with(free_port(false), Vec::new())
    }

    fn start_with(port: u16, extra: Vec<String>) -> Self {
        require("redis-server");
        let mut s = Self { child: None, port, dir: temp_dir(), extra };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().expect("a UTF-8 temporary path")])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start redis-server ({e}): {INSTALL}"));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(Some(status)) = self.child.as_mut().map(|c| c.try_wait().ok().flatten()) {
                panic!("redis-server on port {} exited at start ({status})", self.port);
            }
            if raw(self.port, "PING", Duration::from_millis(200)).is_some_and(|r| r.starts_with("+PONG")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer PING within 20 s", self.port);
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> String {
        self.child.as_ref().expect("the server runs").id().to_string()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.pid()]).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "kill {sig} failed");
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the process (SIGKILL): connections are reset, the data is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a new process on the same port (after `kill`).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs one command through redis-cli and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        require("redis-cli");
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("could not run redis-cli ({e}): {INSTALL}"));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three primaries (no replicas), each slot range on one node.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        require("redis-cli");
        let mut nodes: Vec<RedisServer> = Vec::new();
        for _ in 0..3 {
            let port = loop {
                let p = free_port(true);
                if nodes.iter().all(|n| n.port != p && n.port + 10_000 != p && p + 10_000 != n.port) {
                    break p;
                }
            };
            let extra =
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"];
            nodes.push(RedisServer::start_with(port, extra.iter().map(|s| s.to_string()).collect()));
        }
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("could not run redis-cli ({e}): {INSTALL}"));
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = cluster.nodes.iter().all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"));
            if ok {
                return cluster;
            }
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node serving `slot` (by `CLUSTER SLOTS` as the first node sees it).
    pub fn node_of_slot(&self, slot: u16) -> &RedisServer {
        let keyslot_port = self.nodes[0].cli(&["cluster", "slots"]);
        // redis-cli prints each range as: start, end, then ip, port, id of the primary.
        let lines: Vec<&str> = keyslot_port.lines().collect();
        let mut i = 0;
        while i + 3 < lines.len() {
            if let (Ok(start), Ok(end)) = (lines[i].parse::<u16>(), lines[i + 1].parse::<u16>())
                && (start..=end).contains(&slot)
                && let Ok(port) = lines[i + 3].parse::<u16>()
                && let Some(n) = self.nodes.iter().find(|n| n.port == port)
            {
                return n;
            }
            i += 1;
        }
        panic!("no node serves slot {slot}: {keyslot_port}")
    }
}
