//! # sluice-gateway
//!
//! The sluice server: everything `sluice serve` runs, over the decision pipeline of
//! `sluice-http`.
//! - [`gateway`]: the configured gateway — routes, body reading, shaping, proxying, reload;
//! - [`decision_api`]: `POST /v1/check`, for applications that ask instead of proxying;
//! - [`forward_auth`]: `[forward_auth]`, for proxies that ask before they forward (Caddy,
//!   Traefik, nginx `auth_request`), deciding by the same routes as the gateway;
//! - [`seed`]: the default service of `sluice serve` without a config;
//! - [`proxy`] and [`body`]: forwarding to the upstream (over `sluice-upstream`'s pooled
//!   client) and replayable request bodies, cut when they stall or break;
//!   [`client_slots`]: requests and body reads in progress per client;
//! - [`serve`]: accept loops (one runtime per core), graceful shutdown, signals; [`balance`]:
//!   connections handed from a worker that serves more than another to the least loaded;
//! - [`timer`]: timeouts that reuse one timer entry per connection;
//! - [`stores`]: the store a configuration asks for (memory or Redis), kept across reloads;
//! - [`observe`] and [`admin`]: Prometheus metrics, sampled decision logs, the admin listener;
//! - [`request_id`]: every request's `X-Request-Id`; [`access_log`]: one line per request,
//!   written when its response ends;
//! - [`error`]: what can go wrong building or reloading a gateway.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_gateway::gateway::Gateway;
//! use sluice_gateway::stores::MemoryStores;
//! let config = sluice_config::parse("gateway.toml", r#"
//! [[policy]]
//! name = "per-ip"
//! algorithm = "token-bucket"
//! capacity = 5
//! refill_per_second = 1
//! [[route]]
//! path = "/api/*"
//! limits = [{ policy = "per-ip", key = "ip" }]
//! "#).unwrap();
//! let clock = Arc::new(sluice_core::SystemClock::new());
//! let gateway = Gateway::new(config, Box::new(MemoryStores::new(clock))).unwrap();
//! assert_eq!(gateway.config().config.routes[0].name, "/api/*");
//! ```

pub mod access_log;
pub mod admin;
pub mod balance;
pub mod body;
pub mod client_slots;
pub mod cors;
pub mod decision_api;
pub mod error;
pub mod forward_auth;
pub mod gateway;
pub mod observe;
pub mod proxy;
pub mod request_id;
pub mod reservations;
pub mod respond;
pub mod seed;
pub mod serve;
pub mod stores;
pub mod timer;
pub mod tls;
pub mod tunnel;
pub mod upstreams;
