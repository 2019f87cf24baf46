//! # sluice-http
//!
//! sluice over HTTP:
//! - [`identity`]: the client address behind trusted proxies (`X-Forwarded-For`, `Forwarded`),
//!   IPv6 grouped by prefix;
//! - [`keys`]: key parts (`ip`, `header:NAME`, `user`, `json:/pointer`, ...) hashed into keys;
//! - [`headers`]: `Retry-After`, `Cache-Control: no-store`, and the `draft-6`, `ietf` and
//!   `x-ratelimit` header styles;
//! - [`layer`]: a tower `Layer` any axum or hyper app can use;
//! - [`gateway`]: the configured gateway (routes, reverse proxy, shaping, decision API, reload);
//! - [`seed`]: the default service of `sluice serve` without a config;
//! - [`observe`]: Prometheus metrics, sampled decision logs, the admin listener.
//!
//! ```
//! use sluice_http::identity::ClientIdentity;
//! // Nobody is trusted: forwarding headers are ignored and the socket peer is the client.
//! let id = ClientIdentity::new(vec![], 56);
//! let mut h = http::HeaderMap::new();
//! h.insert("x-forwarded-for", "1.2.3.4".parse().unwrap());
//! assert_eq!(id.client_ip("198.51.100.1".parse().unwrap(), &h).to_string(), "198.51.100.1");
//! ```

pub mod body;
pub mod check_api;
pub mod enforce;
pub mod gateway;
pub mod headers;
pub mod identity;
pub mod keys;
pub mod layer;
pub mod memory_factory;
pub mod observe;
pub mod proxy;
pub mod respond;
pub mod seed;
pub mod serve;
