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
    /// The process, while it runs.
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

    /// A standalone server on a free port, with more `redis-server` arguments.
    pub fn start_with_args(extra: &[&str]) -> Self {
        Self::start_with(free_port(false), extra.iter().map(|a| a.to_string()).collect())
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
            if raw(self.port, "PING", Duration::from_millis(200))
                .is_some_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
            {
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

    /// Whether `INFO replication` says it replicates a primary.
    pub fn is_replica(&self) -> bool {
        self.cli(&["info", "replication"]).contains("role:slave")
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

/// A Redis Cluster: primaries each serving a slot range, and replicas of them (none, or one each).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three primaries, no replicas.
    pub fn start() -> Self {
        Self::start_nodes(3, 0, 5_000)
    }

    /// Three primaries and one replica of each, with a node timeout of one second (a primary
    /// that stops answering is failed over within a few seconds). Returns once every replica is
    /// in sync with its primary.
    pub fn start_with_replicas() -> Self {
        let cluster = Self::start_nodes(3, 1, 1_000);
        let deadline = Instant::now() + Duration::from_secs(30);
        let synced = |n: &RedisServer| {
            let info = n.cli(&["info", "replication"]);
            !info.contains("role:slave") || info.contains("master_link_status:up")
        };
        while !cluster.nodes.iter().all(synced) {
            assert!(Instant::now() < deadline, "the replicas did not sync within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(cluster.nodes.iter().filter(|n| n.is_replica()).count(), 3, "three replicas");
        cluster
    }

    fn start_nodes(primaries: usize, replicas: usize, node_timeout_ms: u64) -> Self {
        require("redis-cli");
        let mut nodes: Vec<RedisServer> = Vec::new();
        for _ in 0..primaries * (1 + replicas) {
            let port = loop {
                let p = free_port(true);
                if nodes.iter().all(|n| n.port != p && n.port + 10_000 != p && p + 10_000 != n.port) {
                    break p;
                }
            };
            let timeout = node_timeout_ms.to_string();
            let extra =
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", &timeout];
            nodes.push(RedisServer::start_with(port, extra.iter().map(|s| s.to_string()).collect()));
        }
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("could not run redis-cli ({e}): {INSTALL}"));
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = Self { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Waits until every live node says `cluster_state:ok`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.live().all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok")) {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes whose process runs.
    pub fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.child.is_some())
    }

    /// For every slot, the index of the node serving it (by `CLUSTER SLOTS` as the first live
    /// node sees it).
    pub fn slot_map(&self) -> Vec<usize> {
        let asked = self.live().next().expect("a live node");
        let slots = asked.cli(&["cluster", "slots"]);
        // redis-cli prints each range as: start, end, then ip, port, id of the primary.
        let lines: Vec<&str> = slots.lines().collect();
        let mut map = vec![usize::MAX; 16_384];
        for w in lines.windows(4) {
            if let (Ok(start), Ok(end), Ok(port)) = (w[0].parse::<usize>(), w[1].parse::<usize>(), w[3].parse::<u16>())
                && start <= end
                && end < map.len()
                && let Some(n) = self.nodes.iter().position(|n| n.port == port)
            {
                map[start..=end].fill(n);
            }
        }
        map
    }

    /// The index of the node serving `slot`.
    pub fn index_of_slot(&self, slot: u16) -> usize {
        let n = self.slot_map()[usize::from(slot)];
        assert_ne!(n, usize::MAX, "no node serves slot {slot}");
        n
    }

    /// The node serving `slot`.
    pub fn node_of_slot(&self, slot: u16) -> &RedisServer {
        &self.nodes[self.index_of_slot(slot)]
    }

    /// The index of the replica of the primary at `primary`.
    pub fn replica_of(&self, primary: usize) -> usize {
        let port = format!("master_port:{}", self.nodes[primary].port);
        self.nodes
            .iter()
            .position(|n| n.child.is_some() && n.is_replica() && n.cli(&["info", "replication"]).contains(&port))
            .unwrap_or_else(|| panic!("no replica of the node on port {}", self.nodes[primary].port))
    }

    /// Waits until `slot` is served by a node other than the one on `port`, every live node
    /// agreeing and the cluster ok; returns that node's index.
    pub fn wait_moved(&self, slot: u16, port: u16, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let now = self.index_of_slot(slot);
            if self.nodes[now].port != port
                && self.live().all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"))
            {
                return now;
            }
            assert!(Instant::now() < deadline, "slot {slot} still on port {port} after {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
