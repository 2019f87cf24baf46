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

    /// Scripts this server has run (`EVALSHA` and `EVAL` calls, from `INFO commandstats`).
    pub fn scripts_run(&self) -> u64 {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("redis-server answers");
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"INFO commandstats\r\n").unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 8192];
        // A bulk string, `$LEN` then the text: read until it is all there.
        loop {
            let n = s.read(&mut buf).unwrap();
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            let len: usize =
                text.lines().next().and_then(|l| l.trim_start_matches('$').trim().parse().ok()).unwrap_or(0);
            if n == 0 || text.len() >= len + 4 {
                break;
            }
        }
        text.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
            .sum()
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

/// Redis Sentinel: a primary, one replica of it, and three Sentinels (quorum 2) that watch it as
/// [`SentinelSet::MASTER`] and fail it over after `down-after-milliseconds` without an answer.
pub struct SentinelSet {
    /// The primary first, then its replica (until a failover swaps their roles).
    pub nodes: Vec<RedisServer>,
    pub sentinels: Vec<Sentinel>,
    /// The password of every process, if any.
    pub password: Option<String>,
    /// Where the two nodes write their logs, shown when a test fails.
    logs: PathBuf,
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for name in ["primary.log", "replica.log"] {
                let log = std::fs::read_to_string(self.logs.join(name)).unwrap_or_default();
                eprintln!("--- the log of the {name}:\n{log}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.logs);
    }
}

/// One `redis-server --sentinel` process.
pub struct Sentinel {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl SentinelSet {
    /// The name the Sentinels monitor the primary by.
    pub const MASTER: &str = "mymaster";

    /// Starts the five processes (every one with `password`, if any: the data nodes'
    /// `requirepass` and `masterauth`, the Sentinels' own `requirepass` and `auth-pass`) and
    /// returns once the replica receives the primary's writes and every Sentinel knows the
    /// replica and the two other Sentinels.
    pub fn start(down_after_ms: u64, password: Option<&str>) -> Self {
        require("redis-cli");
        // A replica syncs at once rather than after the default diskless delay of 5 s.
        let mut auth: Vec<&str> = vec!["--repl-diskless-sync-delay", "0"];
        auth.extend(password.map_or_else(Vec::new, |p| vec!["--requirepass", p, "--masterauth", p]));
        let logs = temp_dir();
        let log = |name: &str| logs.join(name).display().to_string();
        let (primary_log, replica_log) = (log("primary.log"), log("replica.log"));
        let primary = RedisServer::start_with_args(&[&["--logfile", &primary_log][..], &auth].concat());
        let port = primary.port.to_string();
        let replica = RedisServer::start_with_args(
            &[&["--replicaof", "127.0.0.1", &port, "--logfile", &replica_log][..], &auth].concat(),
        );
        let mut set =
            Self { nodes: vec![primary, replica], sentinels: Vec::new(), password: password.map(str::to_string), logs };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !set.cli(set.nodes[1].port, &["info", "replication"]).contains("master_link_status:up") {
            assert!(Instant::now() < deadline, "the replica did not sync within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        // After a diskless sync the primary streams writes only once the replica has first
        // acknowledged (it does every second): until then a failover would lose every write.
        assert_eq!(set.cli(set.nodes[0].port, &["set", "sentinel-set-streaming", "1"]), "OK");
        while set.cli(set.nodes[1].port, &["exists", "sentinel-set-streaming"]) != "1" {
            assert!(Instant::now() < deadline, "the replica did not receive a write within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        set.cli(set.nodes[0].port, &["del", "sentinel-set-streaming"]);
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 3 {
            let p = free_port(false);
            if set.nodes.iter().all(|n| n.port != p) && !ports.contains(&p) {
                ports.push(p);
            }
        }
        // Each Sentinel is told of the others and of the replica, as it would write them itself
        // once it found them: they agree at once rather than after their first hellos.
        let id = |port: u16| format!("{port:040x}");
        for &port in &ports {
            let mut known = format!("sentinel myid {}\n", id(port));
            known.push_str(&format!("sentinel known-replica {} 127.0.0.1 {}\n", Self::MASTER, set.nodes[1].port));
            for &other in ports.iter().filter(|&&o| o != port) {
                known.push_str(&format!("sentinel known-sentinel {} 127.0.0.1 {other} {}\n", Self::MASTER, id(other)));
            }
            set.sentinels.push(Sentinel::start(port, set.nodes[0].port, down_after_ms, password, &known));
        }
        let known = |s: &Sentinel| {
            let master = set.cli(s.port, &["sentinel", "master", Self::MASTER]);
            let field = |name: &str| {
                let lines: Vec<&str> = master.lines().collect();
                lines.windows(2).find(|w| w[0] == name).map(|w| w[1].to_string())
            };
            field("num-other-sentinels").as_deref() == Some("2") && field("num-slaves").as_deref() == Some("1")
        };
        while !set.sentinels.iter().all(known) {
            assert!(Instant::now() < deadline, "the Sentinels did not find each other and the replica within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        set
    }

    /// The Sentinels' URLs, with the password if any.
    pub fn urls(&self) -> Vec<String> {
        let auth = self.password.as_ref().map_or(String::new(), |p| format!(":{p}@"));
        self.sentinels.iter().map(|s| format!("redis://{auth}127.0.0.1:{}", s.port)).collect()
    }

    /// Runs one command through redis-cli on `port` (a node or a Sentinel), with the password.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
        if let Some(p) = &self.password {
            command.args(["-a", p, "--no-auth-warning"]);
        }
        let out = command.args(args).output().unwrap_or_else(|e| panic!("could not run redis-cli ({e}): {INSTALL}"));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The port of the primary the Sentinel on `port` names, if it answers.
    pub fn named_by(&self, port: u16) -> Option<u16> {
        self.cli(port, &["sentinel", "get-master-addr-by-name", Self::MASTER]).lines().nth(1)?.parse().ok()
    }

    /// The index in `nodes` of the node on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// Waits until every Sentinel names a primary other than the node on `port` and that node
    /// says it is a primary; returns its index in `nodes`.
    pub fn wait_failover(&self, port: u16, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(|s| self.named_by(s.port)).collect();
            if let Some(Some(now)) = named.first()
                && *now != port
                && named.iter().all(|n| *n == Some(*now))
                && self.cli(*now, &["role"]).starts_with("master")
            {
                return self.index_of(*now);
            }
            assert!(Instant::now() < deadline, "no failover away from port {port} within {within:?}: {named:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many bytes of the replication stream the primary at `primary` has sent that the
    /// replica has not acknowledged (its `INFO replication`; acknowledged once a second).
    pub fn replica_behind(&self, primary: usize) -> Option<u64> {
        let info = self.cli(self.nodes[primary].port, &["info", "replication"]);
        let field = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let sent: u64 = field("master_repl_offset:")?.parse().ok()?;
        let acked: u64 = field("slave0:")?.split(',').find_map(|kv| kv.strip_prefix("offset="))?.parse().ok()?;
        Some(sent.saturating_sub(acked))
    }
}

impl Sentinel {
    fn start(port: u16, primary: u16, down_after_ms: u64, password: Option<&str>, known: &str) -> Self {
        require("redis-server");
        let dir = temp_dir();
        let name = SentinelSet::MASTER;
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\nsentinel monitor {name} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {name} {down_after_ms}\nsentinel failover-timeout {name} 10000\n\
             sentinel parallel-syncs {name} 1\n",
            dir = dir.display()
        );
        if let Some(p) = password {
            conf.push_str(&format!("requirepass {p}\nsentinel auth-pass {name} {p}\n"));
        }
        conf.push_str(known);
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, conf).expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&file)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start redis-server --sentinel ({e}): {INSTALL}"));
        let mut s = Self { child: Some(child), port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(Some(status)) = s.child.as_mut().map(|c| c.try_wait().ok().flatten()) {
                panic!("redis-server --sentinel on port {port} exited at start ({status})");
            }
            if raw(port, "PING", Duration::from_millis(200))
                .is_some_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
            {
                return s;
            }
            assert!(Instant::now() < deadline, "redis-server --sentinel on port {port} did not answer within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
            eprintln!("--- the log of the Sentinel on port {}:\n{log}", self.port);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
