#![doc = include_str!("../README.md")]
//!
//! ## What is here
//!
//! - [`RateLimitLayer`] and its [`RateLimitLayerBuilder`]: the layer, its limits and settings.
//! - The policies a store holds: [`TokenBucket`], [`FixedWindow`], [`SlidingLog`],
//!   [`SlidingWindow`], [`LeakyBucket`] (each converts into a [`Policy`]).
//! - The stores: [`MemoryStore`] (one process) and, with the `redis` feature, `RedisStore`.
//! - Keys: the configuration file's strings ([`IntoKey`], [`KeySpec`]).

pub use ipnet::IpNet;
pub use sluice_config::{ForwardedHeader, HeaderStyle, KeySource, KeySpec};
/// The configuration file's duration strings (`"250ms"`, `"1m"`, `"1.5h"`) in nanoseconds, for
/// windows written as the file writes them: `SlidingWindow::per(100, Duration::from_nanos(parse_duration("1m")?))`.
pub use sluice_core::parse_duration;
pub use sluice_core::{
    Clock, Decision, FixedWindow, LeakMode, LeakyBucket, ManualClock, ParamError, Policy, SlidingLog, SlidingWindow,
    SystemClock, TokenBucket,
};
pub use sluice_http::layer::{
    AnswerBody, DEFAULT_ROUTE_NAME, IntoKey, LayerError, Observe, PeerFn, RateLimit, RateLimitLayer,
    RateLimitLayerBuilder, UsedCost, default_peer,
};
pub use sluice_http::lifecycle::Counted;
pub use sluice_http::pipeline::Ruling;
pub use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store, StoreError, WhenFull};

/// Bearer tokens: how `jwt:CLAIM` key parts are verified ([`RateLimitLayerBuilder::jwt`]).
#[cfg(feature = "jwt")]
pub use sluice_config::Jwt;

/// sluice's TOML configuration: policies, routes and limits read and validated as the gateway
/// reads its file, every error naming the file, the line and the field.
#[cfg(feature = "config")]
pub use sluice_config::{Config, ConfigError, load, parse};

/// A store shared by every instance on Redis (or Redis Cluster): one atomic script call per
/// decision. Every instance must be given the same `.key_secret(...)`, and the options a
/// failure mode ([`OnError`]).
#[cfg(feature = "redis")]
pub use sluice_redis::{OnError, RedisOptions, RedisStore, RedisStoreError};
