//! # sluice-http
//!
//! sluice for any axum or hyper app: the decision pipeline and its parts, with no server in it.
//! - [`identity`]: the client address behind trusted proxies (`X-Forwarded-For`, `Forwarded`),
//!   IPv6 grouped by prefix, resolved once per request into a [`identity::Client`];
//! - [`keys`]: key parts (`ip`, `header:NAME`, `user`, `json:/pointer`, `form:FIELD`, ...) hashed
//!   into keys; a keyed header in two lines, two spellings or with bytes beyond printable ASCII
//!   is refused;
//! - [`body_key`] and [`form_body`]: which JSON or form body may be keyed, and which is refused
//!   (a content type the route does not read, a keyed field also in the query, ambiguity);
//! - [`account`]: account names compared as an accent-, width- and case-insensitive application
//!   compares them (a Unicode skeleton);
//! - [`jwt`]: bearer tokens verified (and cached) for `jwt:CLAIM` key parts and plans;
//! - [`enforce`]: a request's checks against a store, shadow policies apart;
//! - [`lifecycle`]: the one request lifecycle every face drives (route, decide, read the body,
//!   decide again, act, pass on, observe), over [`pipeline`]: facts → checks → decision →
//!   [`pipeline::Action`];
//! - [`headers`] and [`response`]: `Retry-After`, `Cache-Control: no-store`, the `draft-6`,
//!   `ietf` and `x-ratelimit` header styles, and the JSON bodies sluice answers with;
//! - [`layer`]: a tower `Layer` over the pipeline.
//!
//! The server (gateway, proxy, decision API, metrics) is the `sluice-gateway` crate.
//!
//! ```
//! use sluice_http::identity::ClientIdentity;
//! // Nobody is trusted: forwarding headers are ignored and the socket peer is the client.
//! let id = ClientIdentity::new(vec![], 56);
//! let mut h = http::HeaderMap::new();
//! h.insert("x-forwarded-for", "1.2.3.4".parse().unwrap());
//! assert_eq!(id.client_ip("198.51.100.1".parse().unwrap(), &h).to_string(), "198.51.100.1");
//! ```

pub mod account;
pub mod body_key;
pub mod body_refusal;
pub mod enforce;
pub mod form_body;
pub mod headers;
pub mod identity;
pub mod jwt;
pub mod keys;
pub mod layer;
pub mod lifecycle;
pub mod meter;
pub mod pipeline;
pub mod response;
pub mod store_health;
