//! The admin listener: the status page (`/`), `/status.json`, `/metrics`, `/healthz`,
//! `/readyz`, `/config`, apart from client traffic (loopback by default).
//!
//! - [`Inspect`]: what a service shows there (the gateway and the seed service implement it);
//! - [`Status`]: the document behind the status page;
//! - the page itself (`status.html`, `status.js`, `status.css`, compiled in), served under a
//!   strict `Content-Security-Policy`: no inline code, no other origin.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_gateway::admin::Admin;
//! use sluice_gateway::gateway::Gateway;
//! use sluice_gateway::stores::MemoryStores;
//! let config = sluice_config::parse("g.toml", "").unwrap();
//! let clock = Arc::new(sluice_core::ManualClock::new(0));
//! let gateway = Arc::new(Gateway::new(config, Box::new(MemoryStores::new(clock))).unwrap());
//! let admin = Admin::new(gateway);
//! assert!(admin.metrics_text().ends_with("# EOF\n"));
//! assert!(admin.ready());
//! ```

mod inspect;
mod page;
mod status;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::gateway::Gateway;
use crate::observe::Exposition;
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler, serve};

pub use inspect::Inspect;
pub use page::CONTENT_SECURITY_POLICY;
pub use status::{DeniedView, Status, StoreHealth, TOP_DENIED_SHOWN};

/// Answers the admin endpoints for one service.
#[derive(Clone)]
pub struct Admin {
    /// The service whose metrics, readiness, configuration and status are shown.
    source: Arc<dyn Inspect>,
}

impl Admin {
    /// The admin endpoints of `gateway`.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { source: gateway }
    }

    /// The admin endpoints of any service that can be inspected (the seed service, say).
    pub fn of(source: Arc<dyn Inspect>) -> Self {
        Self { source }
    }

    /// The `/metrics` text (OpenMetrics): counters and histograms, then what is read now (requests in flight,
    /// the store's keys, readiness, breaker), then the process.
    pub fn metrics_text(&self) -> String {
        self.source.metrics_text()
    }

    /// True when the store in use can decide, or its failure mode lets the service serve.
    pub fn ready(&self) -> bool {
        self.source.readiness().0
    }

    fn answer(&self, method: &Method, path: &str, accept: Option<&str>) -> Response<Body> {
        let mut res = self.route(method, path, accept);
        res.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        page::harden(res.headers_mut());
        res
    }

    fn route(&self, method: &Method, path: &str, accept: Option<&str>) -> Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            let mut res = respond::error(405, "method_not_allowed", "Use GET.");
            res.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return res;
        }
        match path {
            "/" | "/status.js" | "/status.css" => page::asset(path),
            "/status.json" => respond::json(200, &self.source.status()),
            "/metrics" => {
                // Prometheus asks for OpenMetrics; other readers get the text format.
                let format = Exposition::negotiate(accept);
                text(200, format.content_type(), format.of(self.metrics_text()))
            }
            "/healthz" => respond::json(200, &serde_json::json!({ "status": "alive" })),
            "/readyz" => match self.source.readiness() {
                (true, store) => respond::json(200, &serde_json::json!({ "status": "ready", "store": store })),
                (false, store) => respond::json(503, &serde_json::json!({ "status": "unready", "store": store })),
            },
            "/config" => respond::json(200, &self.source.config_json()),
            _ => respond::error(
                404,
                "not_found",
                "Admin endpoints: / (status page), /status.json, /metrics, /healthz, /readyz, /config.",
            ),
        }
    }
}

fn text(status: u16, content_type: &'static str, body: String) -> Response<Body> {
    let len = body.len();
    let mut res = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    res.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(len));
    res
}

impl Handler for Admin {
    async fn handle(self: Arc<Self>, _peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
        let mut res = self.answer(req.method(), req.uri().path(), accept);
        if req.method() == Method::HEAD {
            *res.body_mut() = Either::Left(Full::new(Bytes::new()));
        }
        Ok(res)
    }
}

/// Serves the admin endpoints of `gateway` on `listener` until `shutdown` completes.
pub async fn serve_admin(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_inspected(listener, gateway, shutdown).await
}

/// Serves the admin endpoints of `source` (the gateway, the seed service) on `listener` until
/// `shutdown` completes.
pub async fn serve_inspected(
    listener: TcpListener,
    source: Arc<dyn Inspect>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve(listener, Arc::new(Admin::of(source)), shutdown, Duration::from_secs(1)).await
}
