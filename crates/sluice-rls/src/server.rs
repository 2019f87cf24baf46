//! The listener: gRPC (`RateLimitService`, `grpc.health.v1.Health`) over HTTP/2 and, on the
//! same port over HTTP/1.1, `POST /json`, `GET /metrics` and `GET /healthcheck`. The server
//! tells the protocols apart by the connection's preface, so Envoy's gRPC cluster and a
//! `curl` share one address.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use sluice_gateway::observe::Exposition;
use tokio::net::TcpListener;
use tonic::body::Body;
use tonic::service::Routes;
use tower::ServiceExt;

use crate::grpc::Grpc;
use crate::json;
use crate::service::Rls;

/// The largest `POST /json` body read.
const MAX_JSON_BYTES: usize = 64 * 1024;

/// Serves `rls` on `listener` until `shutdown` completes, then lets open requests finish.
pub async fn serve(listener: TcpListener, rls: Arc<Rls>, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RateLimitServiceServer<Grpc>>().await;
    let routes = Routes::new(RateLimitServiceServer::new(Grpc(rls.clone()))).add_service(health).prepare();
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                // A connection that failed before it was accepted (reset, out of descriptors):
                // the listener itself is fine.
                Err(_) => continue,
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (routes, rls) = (routes.clone(), rls.clone());
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (routes, rls) = (routes.clone(), rls.clone());
            async move { Ok::<_, Infallible>(route(req, routes, rls).await) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    // Refuse new connections at once (a client sees the service gone, not a silent backlog).
    drop(listener);
    reporter.set_not_serving::<RateLimitServiceServer<Grpc>>().await;
    graceful.shutdown().await;
    Ok(())
}

async fn route(req: Request<Incoming>, routes: Routes, rls: Arc<Rls>) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/json") => json_answer(req, &rls).await,
        (&Method::GET, "/metrics") => {
            // The same negotiation as the gateway's admin listener: OpenMetrics to Prometheus,
            // the text format (which promtool and other agents read) to everyone else.
            let accept = req.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok());
            let format = Exposition::negotiate(accept);
            plain(StatusCode::OK, format.content_type(), format.of(rls.metrics_text()))
        }
        (&Method::GET, "/healthcheck") => plain(StatusCode::OK, "text/plain", "OK".into()),
        _ => match routes.oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
    }
}

async fn json_answer(req: Request<Incoming>, rls: &Rls) -> Response<Body> {
    let body = match Limited::new(req.into_body(), MAX_JSON_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return plain(StatusCode::BAD_REQUEST, "text/plain", "body unreadable or too large\n".into()),
    };
    let request = match json::parse_request(&body) {
        Ok(r) => r,
        Err(e) => return plain(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n")),
    };
    match rls.should_rate_limit(&request).await {
        Ok(r) => plain(json::status_of(&r), "application/json", json::response_json(&r).to_string()),
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            plain(StatusCode::BAD_REQUEST, "text/plain", format!("{}\n", s.message()))
        }
        Err(s) => plain(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{}\n", s.message())),
    }
}

fn plain(status: StatusCode, content_type: &'static str, text: String) -> Response<Body> {
    let mut r = Response::new(Body::new(Full::new(Bytes::from(text))));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

/// Reloads `rls` whenever its descriptor directory holds other bytes than the load in use was
/// parsed from (a file written, added, removed, or a ConfigMap's links swapped), looking every
/// `every`, until the process ends. Comparing with what was parsed, not with the last look,
/// means a file rewritten while a reload read it is read again, and a change made before the
/// first look is not missed. Every reload is logged and counted ([`Rls::reload`]); a refused
/// one keeps the running descriptors and is also told on stderr, once: it is tried again when
/// the files change again (or on SIGHUP).
pub async fn reload_on_change(rls: Arc<Rls>, every: std::time::Duration) {
    let dir = rls.descriptors_dir().to_path_buf();
    let mut refused_at: Option<crate::loader::DirStamp> = None;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = crate::loader::dir_stamp(&dir);
        if rls.loaded_from(&now) || refused_at.as_ref() == Some(&now) {
            continue;
        }
        match rls.reload() {
            Ok(()) => refused_at = None,
            Err(e) => {
                refused(&e);
                refused_at = Some(now);
            }
        }
    }
}

/// Tells stderr that a reload was refused, in one write (a reader never sees half the line).
fn refused(e: &crate::service::RlsError) {
    let line = format!("sluice rls reload refused, keeping the running descriptors: {e}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
}

/// Reloads `rls` on every SIGHUP until the process ends ([`Rls::reload`] logs and counts it); a
/// refused reload keeps the running descriptors and is also told on stderr. The signal is
/// listened for from this call on, not from the future's first poll: a SIGHUP sent once the
/// service answers is never missed (call it, then spawn the future, before serving). Must be
/// called within a tokio runtime.
pub fn reload_on_hangup(rls: Arc<Rls>) -> impl std::future::Future<Output = ()> + Send {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    async move {
        #[cfg(unix)]
        {
            let Some(mut hup) = hup else { return };
            while hup.recv().await.is_some() {
                if let Err(e) = rls.reload() {
                    refused(&e);
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = rls;
        }
    }
}
