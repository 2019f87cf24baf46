//! Connections to Redis or a Redis Cluster: made lazily, dropped after a failure and made again
//! by the next call the breaker lets through. A single node over TCP gets lean connections
//! ([`crate::lean`]: no driver task): one per current-thread runtime's thread, so a gateway
//! worker's requests never leave its thread, and one shared by multi-thread runtimes; a Cluster, or a node behind a Unix socket, one redis-rs connection shared
//! by every request (multiplexed, pipelined by its driver task). A primary that Sentinels name
//! ([`crate::sentinel`]) gets lean connections like a single node, each confirmed with `ROLE`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ErrorKind, ProtocolVersion, RedisConnectionInfo, RedisError,
    RedisResult, Value,
};

use crate::error::RedisStoreError;
use crate::lean::LeanConn;
use crate::options::RedisOptions;
use crate::sentinel::Sentinels;
use crate::stats::Counters;

/// A connection; every kind pipelines concurrent requests and is cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Lean(Arc<LeanConn>),
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Sends `cmd`; an error reply comes back as `Err`.
    pub async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let reply = match self {
            Conn::Lean(c) => lean_query(c, cmd).await?,
            Conn::Single(c) => c.req_packed_command(cmd).await?,
            Conn::Cluster(c) => cluster_query(c, cmd).await?,
        };
        reply.extract_error()
    }
}

/// Times a Cluster command is sent again, beyond redis-rs's own one retry, when the cluster
/// answers that it is changing hands.
const CLUSTER_TRANSITION_RETRIES: u32 = 2;

/// `cmd` on a Cluster, sent again (up to [`CLUSTER_TRANSITION_RETRIES`] times) when the reply
/// says the command was not run because its slot is changing hands: `MOVED` or `ASK` (redis-rs
/// follows one redirect, and the node it then asks may hold an older map than the first), and
/// `TRYAGAIN`, after a short wait. CI once saw a planned `CLUSTER FAILOVER` answer two decisions
/// of 6,890 with a second `MOVED`. Not `CLUSTERDOWN`: a killed primary's slots answer it for
/// seconds, and waiting to ask again made each of those decisions slower (the worst 50-72 ms
/// against 22-32 ms in `cluster_faults`) without saving one. A dead node's connection errors
/// keep redis-rs's one retry; the store's timeout bounds it all.
async fn cluster_query(conn: &mut ClusterConnection, cmd: &Cmd) -> RedisResult<Value> {
    let mut again = 0;
    loop {
        match conn.req_packed_command(cmd).await.and_then(Value::extract_error) {
            Err(e) if again < CLUSTER_TRANSITION_RETRIES && changing_hands(&e) => {
                again += 1;
                if e.kind() == ErrorKind::TryAgain {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            other => return other,
        }
    }
}

/// A Cluster's answer that the command was not run because its slot is changing hands, and
/// will be where the answer says (or, for `TRYAGAIN`, in a moment).
fn changing_hands(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask | ErrorKind::TryAgain)
}

/// A command off the hot path (`PING`, `CONFIG GET`, `AUTH`) on a lean connection: written and
/// read by redis-rs's own encoder and parser (an error reply is a value: see [`Conn::query`]).
pub(crate) async fn lean_query(conn: &LeanConn, cmd: &Cmd) -> RedisResult<Value> {
    conn.request(|out| cmd.write_packed_command(out), redis::parse_redis_value).await?
}

/// What a store connects to; `Sentinel`: the primary the Sentinels name, over lean connections.
enum Target {
    Lean { host: String, port: u16, redis: RedisConnectionInfo },
    Single(Client),
    Cluster(ClusterClient),
    Sentinel(Sentinels),
}

/// How many lean connections a store keeps at most: one shared by the workers of multi-thread
/// runtimes, and one per current-thread runtime's thread (threads beyond this share them).
fn lean_slots() -> usize {
    1 + std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 64)
}

/// The slot of the calling task's lean connection, among `slots`. A multi-thread runtime moves
/// tasks between its workers: they share one connection, so their requests go out together.
/// A current-thread runtime (a gateway worker) has its thread's own.
fn lean_slot(slots: usize) -> usize {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let shared = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if shared || slots == 1 { 0 } else { 1 + thread_number() % (slots - 1) }
}

/// A number for the calling thread, the same for its whole life.
fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

/// Holds the current connections, if any, and makes one when needed (one attempt at a time).
pub(crate) struct Connector {
    target: Target,
    timeout: Duration,
    /// One for a shared connection; for lean ones, see [`lean_slot`]. Each with the
    /// [`Connector::generation`] it was made under.
    current: Vec<Mutex<Option<(Conn, u64)>>>,
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.target {
            Target::Lean { .. } => "single (lean)",
            Target::Single(_) => "single",
            Target::Cluster(_) => "cluster",
            Target::Sentinel(_) => "sentinel (lean)",
        };
        f.debug_struct("Connector").field("target", &kind).finish_non_exhaustive()
    }
}

fn bad_url(url: &str, e: RedisError) -> RedisStoreError {
    RedisStoreError::BadUrl { url: url.to_string(), reason: e.to_string() }
}

impl Connector {
    /// Parses the URLs; connects nothing yet.
    pub fn new(options: &RedisOptions) -> Result<Self, RedisStoreError> {
        let target = if let Some(master) = &options.sentinel {
            Target::Sentinel(Sentinels::new(master, &options.urls)?)
        } else if options.cluster {
            for url in &options.urls {
                Client::open(url.as_str()).map_err(|e| bad_url(url, e))?;
            }
            let client = ClusterClient::builder(options.urls.clone())
                .connection_timeout(options.timeout)
                .retries(1)
                .min_retry_wait(1)
                .max_retry_wait(options.timeout.as_millis().try_into().unwrap_or(u64::MAX))
                .build()
                .map_err(|e| bad_url(&options.urls.join(","), e))?;
            Target::Cluster(client)
        } else {
            let url = &options.urls[0];
            let client = Client::open(url.as_str()).map_err(|e| bad_url(url, e))?;
            let info = client.get_connection_info();
            match &info.addr {
                ConnectionAddr::Tcp(host, port) if info.redis.protocol == ProtocolVersion::RESP2 => {
                    Target::Lean { host: host.clone(), port: *port, redis: info.redis.clone() }
                }
                _ => Target::Single(client),
            }
        };
        let slots = if matches!(target, Target::Lean { .. } | Target::Sentinel(_)) { lean_slots() } else { 1 };
        Ok(Self {
            target,
            timeout: options.timeout,
            current: (0..slots).map(|_| Mutex::new(None)).collect(),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    /// The slot of the calling thread's connection.
    fn slot(&self, index: usize) -> std::sync::MutexGuard<'_, Option<(Conn, u64)>> {
        // Holds an Option of a handle: no invariant a panic could break.
        self.current[index].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection in slot `index` unless there is none, it failed, or it was made to a
    /// node the Sentinels no longer name.
    fn usable(&self, index: usize) -> Option<Conn> {
        let generation = self.generation();
        let (conn, made) = self.slot(index).clone()?;
        (made == generation && !matches!(&conn, Conn::Lean(lean) if lean.is_broken())).then_some(conn)
    }

    /// Which primary the Sentinels name ([`Sentinels::generation`]); always 0 without them.
    fn generation(&self) -> u64 {
        match &self.target {
            Target::Sentinel(sentinels) => sentinels.generation(),
            _ => 0,
        }
    }

    /// The calling thread's connection, connecting first if there is none.
    pub async fn get(&self, counters: &Counters) -> RedisResult<Conn> {
        // Fixed now: the task may resume on another thread.
        let index = lean_slot(self.current.len());
        if let Some(c) = self.usable(index) {
            return Ok(c);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(c) = self.usable(index) {
            return Ok(c);
        }
        let mut generation = 0;
        let conn = match &self.target {
            Target::Lean { host, port, redis } => Conn::Lean(Arc::new(lean_connect(host, *port, redis).await?)),
            Target::Sentinel(sentinels) => {
                let ((host, port), named) = sentinels.primary().await?;
                generation = named;
                let conn = async {
                    let conn = lean_connect(&host, port, sentinels.redis()).await?;
                    confirm_primary(&conn, &host, port).await?;
                    Ok::<_, RedisError>(conn)
                };
                match conn.await {
                    Ok(conn) => Conn::Lean(Arc::new(conn)),
                    Err(e) => {
                        sentinels.forget();
                        return Err(e);
                    }
                }
            }
            Target::Single(client) => {
                let config = AsyncConnectionConfig::new().set_connection_timeout(self.timeout);
                Conn::Single(client.get_multiplexed_async_connection_with_config(&config).await?)
            }
            Target::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
        };
        counters.connects.fetch_add(1, Ordering::Relaxed);
        *self.slot(index) = Some((conn.clone(), generation));
        Ok(conn)
    }

    /// Forgets the current connections after a failure (Redis restarted or hangs: every one
    /// of them is likely gone); the next call connects again.
    pub fn discard(&self) {
        for index in 0..self.current.len() {
            *self.slot(index) = None;
        }
        if let Target::Sentinel(sentinels) = &self.target {
            sentinels.forget();
        }
    }
}

/// A lean connection to `host:port`, authenticated and on the database `redis` says.
async fn lean_connect(host: &str, port: u16, redis: &RedisConnectionInfo) -> RedisResult<LeanConn> {
    let conn = LeanConn::connect(host, port).await?;
    if let Some(password) = &redis.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = &redis.username {
            auth.arg(user);
        }
        lean_query(&conn, auth.arg(password)).await?.extract_error()?;
    }
    if redis.db != 0 {
        lean_query(&conn, redis::cmd("SELECT").arg(redis.db)).await?.extract_error()?;
    }
    Ok(conn)
}

/// `ROLE` on a node the Sentinels named: an error unless it is a primary (a failed-over primary
/// back as a replica, before the Sentinels have noticed, is not one).
async fn confirm_primary(conn: &LeanConn, host: &str, port: u16) -> RedisResult<()> {
    let role = lean_query(conn, &redis::cmd("ROLE")).await?.extract_error()?;
    match role {
        Value::Array(items) if items.first() == Some(&Value::BulkString(b"master".to_vec())) => Ok(()),
        other => {
            let why = format!("{host}:{port}, named by the Sentinels, is not a primary (ROLE: {other:?})");
            Err(RedisError::from((ErrorKind::ReadOnly, "not the primary", why)))
        }
    }
}

/// Errors after which the connection is replaced. A script error or a `NOSCRIPT` leaves it.
pub(crate) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterDown
                | ErrorKind::BusyLoadingError
                | ErrorKind::ReadOnly
        )
}
