//! # sluice-upstream
//!
//! sluice's client to its upstream (HTTP/1.1, or HTTP/2), over any async socket:
//! - [`h1`]: the proxy's own exchange for requests without a body — the request head written,
//!   the response head parsed and its framing checked once, the body decoded with bounds;
//! - [`pool`]: a worker thread's connections to one upstream, response bodies that give their
//!   connection back at their end (and fail when the upstream stalls inside them); requests with
//!   a body go through hyper's client, on connections of the same pool;
//! - [`multiplexed`]: HTTP/2 instead, every request of a worker thread a stream of one
//!   connection;
//! - [`hop_by_hop`]: the fields a proxy never passes on, one definition for requests and
//!   responses;
//! - [`socket`]: what a connection runs over ([`socket::Socket`]: TCP, or a scripted stream in
//!   tests) and how a pool opens one ([`socket::Connect`]);
//! - [`timeouts`]: how long a request may wait to connect, for its response head, and inside
//!   its response body;
//! - [`deadline`]: a future raced against a sleep its connection keeps.
//!
//! It knows nothing of the gateway: no configuration, no limits, no client slots. What a
//! response body holds until it is dropped (the gateway's slot in flight) is a type parameter,
//! and so is the request body hyper's client sends.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_upstream::pool::ConnPool;
//! use sluice_upstream::socket::TcpConnect;
//! let pool: Arc<ConnPool<TcpConnect, http_body_util::Empty<bytes::Bytes>>> =
//!     Arc::new(ConnPool::new(TcpConnect::new("127.0.0.1:8080".into())));
//! pool.sweep();
//! ```

pub mod deadline;
pub mod h1;
pub mod hop_by_hop;
pub mod multiplexed;
pub mod pool;
pub mod socket;
pub mod timeouts;
pub mod tls;
