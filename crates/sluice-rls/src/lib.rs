//! # sluice-rls
//!
//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`, gRPC, and
//! envoyproxy/ratelimit's `POST /json`) deciding on sluice's pipeline
//! ([`sluice_http::pipeline::Limiter`]) and stores, configured by envoyproxy/ratelimit's YAML
//! descriptor files unchanged — plus, per `rate_limit`, sluice's `algorithm` (`fixed-window`
//! by default, `sliding-log`, `sliding-window`, `token-bucket` and `leaky-bucket` with
//! `burst`) and any period (`unit_multiplier`, or `window: 30s`).
//!
//! Its decisions are counted and logged as the gateway's are, under the same metric names and
//! decision line fields ([`sluice_gateway::observe::FaceObserver`]), with `route` `rls:<domain>`
//! for the configured domains only; [`Rls::with_observer`] counts into the gateway's observer,
//! so that `sluice serve` shows both on one admin listener ([`admin::WithRls`]). The service's
//! own port keeps envoyproxy/ratelimit's kind of counters (`sluice_rls_*`) on `GET /metrics`.
//!
//! ```
//! use std::sync::Arc;
//! use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor::Entry};
//! use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, rate_limit_response::Code};
//! use sluice_core::ManualClock;
//! use sluice_gateway::stores::MemoryStores;
//! use sluice_rls::Rls;
//!
//! let dir = std::env::temp_dir().join(format!("sluice-rls-lib-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! std::fs::write(dir.join("api.yaml"), "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n").unwrap();
//! let config = sluice_config::parse("sluice.toml", &format!("[rls]\ndescriptors = {:?}\n", dir.display().to_string())).unwrap();
//! let clock = Arc::new(ManualClock::new(0));
//! let rls = Rls::new(&config, Box::new(MemoryStores::new(clock.clone())), clock.clone()).unwrap();
//!
//! let entry = Entry { key: "user".into(), value: "alice".into() };
//! let request = RateLimitRequest {
//!     domain: "api".into(),
//!     descriptors: vec![RateLimitDescriptor { entries: vec![entry], ..Default::default() }],
//!     hits_addend: 0,
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let codes: Vec<i32> = (0..3).map(|_| rt.block_on(rls.should_rate_limit(&request)).unwrap().overall_code).collect();
//! assert_eq!(codes, [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
//! let counted = rls.counts().into_iter().find(|c| c.route == "rls:api").unwrap();
//! assert_eq!((counted.allowed, counted.denied), (2, 1));
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod admin;
mod answer;
mod descriptor_match;
pub mod descriptors;
mod error;
mod face;
pub mod grpc;
pub mod json;
mod loader;
mod metrics;
pub mod rate_limit;
pub mod server;
mod service;
mod snapshot;
mod store_checks;
mod yaml;

pub use answer::UNLIMITED_REMAINING;
pub use descriptors::{Descriptors, Limit, Matched};
pub use error::RlsConfigError;
pub use loader::{dangling_replaces, load_dir, parse_file};
pub use server::{reload_on_change, reload_on_hangup, serve};
pub use service::{Rls, RlsError};
pub use snapshot::{MAX_OVERRIDE_POLICIES, ROUTE_PREFIX, UNKNOWN_DOMAIN_ROUTE};
