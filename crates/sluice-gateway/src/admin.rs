//! The admin listener: `GET /metrics`, `/healthz`, `/readyz`, `/config`, apart from client
//! traffic (loopback by default).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::gateway::Gateway;
use crate::observe::{Scrape, config_json};
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler, serve};

/// Content type of `/metrics`: the OpenMetrics text format, which Prometheus scrapes natively.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers the admin endpoints for one gateway.
#[derive(Clone)]
pub struct Admin {
    /// The gateway whose metrics, readiness and configuration are shown.
    gateway: Arc<Gateway>,
}

impl Admin {
    /// The admin endpoints of `gateway`.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self { gateway }
    }

    /// The `/metrics` text: counters and histograms, then what is read now (requests in flight,
    /// the store's keys, readiness, breaker), then the process.
    pub fn metrics_text(&self) -> String {
        let loaded = self.gateway.config();
        let scrape = Scrape::of(loaded.store().as_ref(), self.gateway.in_flight());
        self.gateway.observer().metrics().render(scrape)
    }

    /// True when the store in use can decide, or its failure mode lets the gateway serve.
    pub fn ready(&self) -> bool {
        self.gateway.config().store().ready()
    }

    fn answer(&self, method: &Method, path: &str) -> Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            let mut res = respond::error(405, "method_not_allowed", "Use GET.");
            res.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return res;
        }
        let mut res = match path {
            "/metrics" => text(200, METRICS_CONTENT_TYPE, self.metrics_text()),
            "/healthz" => respond::json(200, &serde_json::json!({ "status": "alive" })),
            "/readyz" => {
                let store = self.gateway.config().store().kind();
                if self.ready() {
                    respond::json(200, &serde_json::json!({ "status": "ready", "store": store }))
                } else {
                    respond::json(503, &serde_json::json!({ "status": "unready", "store": store }))
                }
            }
            "/config" => respond::json(200, &config_json(&self.gateway.config().config)),
            _ => respond::error(404, "not_found", "Admin endpoints: /metrics, /healthz, /readyz, /config."),
        };
        res.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        res
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
        let mut res = self.answer(req.method(), req.uri().path());
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
    serve(listener, Arc::new(Admin::new(gateway)), shutdown, Duration::from_secs(1)).await
}
