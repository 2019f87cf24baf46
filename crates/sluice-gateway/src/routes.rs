//! The configured routes as every face that decides by route uses them: which route a request
//! takes, and the decision of that route's limits that need no body. The gateway and
//! forward-auth share these steps, so a request is limited the same way through either.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_gateway::gateway::Gateway;
//! use sluice_gateway::routes;
//! use sluice_gateway::stores::MemoryStores;
//! let config = sluice_config::parse("gateway.toml", r#"
//! [[policy]]
//! name = "per-ip"
//! algorithm = "fixed-window"
//! limit = 1
//! window = "1m"
//! [[route]]
//! path = "/api/*"
//! methods = ["GET"]
//! limits = [{ policy = "per-ip", key = "ip" }]
//! "#).unwrap();
//! let clock = Arc::new(sluice_core::ManualClock::new(0));
//! let gateway = Gateway::new(config, Box::new(MemoryStores::new(clock))).unwrap();
//! let loaded = gateway.config();
//! let path = sluice_http::pipeline::route_path("/API/./items").unwrap();
//! let (index, route) = routes::find(&loaded.config.routes, "head", &path).unwrap();
//! assert_eq!((index, route.name.as_str()), (0, "/api/*"));
//! assert!(routes::find(&loaded.config.routes, "POST", &path).is_none());
//!
//! let client = loaded.limiter.client("203.0.113.9".parse().unwrap(), &http::HeaderMap::new());
//! let headers = http::HeaderMap::new();
//! let facts = sluice_http::keys::RequestFacts {
//!     method: "GET", path: &path, route: &route.name, client: &client, headers: &headers, body: None,
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let first = runtime.block_on(routes::decide_bodiless(&loaded.limiter, route, &facts)).unwrap();
//! assert!(first.allowed());
//! let second = runtime.block_on(routes::decide_bodiless(&loaded.limiter, route, &facts)).unwrap();
//! assert!(!second.allowed(), "the second in the same minute is over the limit");
//! ```

use sluice_config::Route;
use sluice_http::keys::RequestFacts;
use sluice_http::pipeline::{Limiter, Refusal, Ruling};

pub use sluice_config::find_route as find;

/// Decides the limits of `route` whose keys need no body, for the request `facts` describes:
/// a client whose quota is spent is refused before anything more of its request is read. A key
/// that is ambiguous (a keyed header in several lines) is refused.
pub async fn decide_bodiless<'l>(
    limiter: &'l Limiter,
    route: &Route,
    facts: &RequestFacts<'_>,
) -> Result<Ruling<'l>, Refusal> {
    let checks = limiter.checks_of(&route.limits, facts, |l| !l.key.needs_body())?;
    Ok(limiter.decide(checks).await)
}
