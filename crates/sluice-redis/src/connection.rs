//! Connections to Redis or a Redis Cluster: made lazily, shared by every request (requests are
//! pipelined over one multiplexed connection), dropped after a failure and made again by the next
//! call the breaker lets through.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, RedisError, RedisResult, Value};

use crate::error::RedisStoreError;
use crate::options::RedisOptions;
use crate::stats::Counters;

/// Either kind of connection; both pipeline concurrent requests and are cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Sends `cmd`; an error reply comes back as `Err`.
    pub async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let reply = match self {
            Conn::Single(c) => c.req_packed_command(cmd).await?,
            Conn::Cluster(c) => c.req_packed_command(cmd).await?,
        };
        reply.extract_error()
    }
}

enum Target {
    Single(Client),
    Cluster(ClusterClient),
}

/// Holds the current connection, if any, and makes one when needed (one attempt at a time).
pub(crate) struct Connector {
    target: Target,
    timeout: Duration,
    current: Mutex<Option<Conn>>,
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.target {
            Target::Single(_) => "single",
            Target::Cluster(_) => "cluster",
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
        let target = if options.cluster {
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
            Target::Single(Client::open(url.as_str()).map_err(|e| bad_url(url, e))?)
        };
        Ok(Self {
            target,
            timeout: options.timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Conn>> {
        // Holds an Option of a handle: no invariant a panic could break.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection, connecting first if there is none.
    pub async fn get(&self, counters: &Counters) -> RedisResult<Conn> {
        if let Some(c) = self.slot().clone() {
            return Ok(c);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(c) = self.slot().clone() {
            return Ok(c);
        }
        let conn = match &self.target {
            Target::Single(client) => {
                let config = AsyncConnectionConfig::new().set_connection_timeout(self.timeout);
                Conn::Single(client.get_multiplexed_async_connection_with_config(&config).await?)
            }
            Target::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
        };
        counters.connects.fetch_add(1, Ordering::Relaxed);
        *self.slot() = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the current connection after a failure; the next call connects again.
    pub fn discard(&self) {
        *self.slot() = None;
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
