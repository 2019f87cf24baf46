//! Forwarding admitted requests to the upstream: pooled connections, streamed bodies.

use std::net::IpAddr;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::body::ReplayBody;
use crate::error::GatewayError;
use crate::respond::{self, Body};

type Pooled = Client<HttpConnector, ReplayBody>;

/// A pooled HTTP/1.1 client for one upstream.
///
/// Each worker thread gets its own connection pool: a pooled connection is driven by a task on
/// the runtime that opened it, so sharing one pool across the per-core runtimes would hand every
/// proxied request to another thread and back.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Names this upstream's pool in each thread's pool list (one per loaded configuration).
    id: u64,
    /// `host:port` every forwarded request is sent to.
    authority: http::uri::Authority,
    /// How long to wait for the response headers before answering 504.
    timeout: Duration,
}

thread_local! {
    /// This thread's pools, by upstream id (a few: an entry per upstream configuration loaded).
    static POOLS: std::cell::RefCell<Vec<(u64, Pooled)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Pools kept per thread; older ones (from configurations reloaded away) are dropped.
const POOLS_PER_THREAD: usize = 4;

fn new_pool() -> Pooled {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(connector)
}

impl Upstream {
    /// A client for `url` (`http://host:port`), waiting at most `timeout` for response headers.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, GatewayError> {
        let bad = |reason: String| GatewayError::UpstreamUrl { url: url.to_owned(), reason };
        let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let authority = uri.authority().cloned().ok_or_else(|| bad("it has no host".into()))?;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { id, authority, timeout })
    }

    /// This thread's pool for this upstream.
    fn pool(&self) -> Pooled {
        POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            if let Some((_, p)) = pools.iter().find(|(id, _)| *id == self.id) {
                return p.clone();
            }
            if pools.len() >= POOLS_PER_THREAD {
                pools.remove(0);
            }
            let p = new_pool();
            pools.push((self.id, p.clone()));
            p
        })
    }

    /// Sends `req` (its body streamed) and returns the upstream's response (streamed), or a
    /// 502/504 JSON answer when the upstream is down or slow.
    pub async fn forward(&self, req: Request<ReplayBody>, client_ip: IpAddr) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder().scheme("http").authority(self.authority.clone()).path_and_query(path).build();
        let Ok(uri) = uri else {
            return respond::error(400, "bad_request", "The request target cannot be forwarded.");
        };
        parts.uri = uri;
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        append_forwarded_for(&mut parts.headers, client_ip);
        let req = Request::from_parts(parts, body);
        match tokio::time::timeout(self.timeout, self.pool().request(req)).await {
            Ok(Ok(res)) => {
                let (mut parts, body) = res.into_parts();
                // The client spoke HTTP/1.1 to sluice, whatever the upstream spoke to sluice.
                parts.version = http::Version::HTTP_11;
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Either::<_, Incoming>::Right(body))
            }
            Ok(Err(_)) => respond::error(502, "bad_gateway", "The upstream service is unavailable."),
            Err(_) => respond::error(504, "gateway_timeout", "The upstream service did not answer in time."),
        }
    }
}

const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including those the `Connection` header lists.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::PROXY_AUTHORIZATION);
}

fn append_forwarded_for(headers: &mut HeaderMap, client: IpAddr) {
    let name = HeaderName::from_static("x-forwarded-for");
    // Several header lines are one list: keep every entry, in order, then add ours.
    let mut entries: Vec<&str> = headers
        .get_all(&name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let client = client.to_string();
    entries.push(&client);
    let joined = entries.join(", ");
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_listed_ones_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret-hop".parse().unwrap());
        h.insert("x-secret-hop", "1".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret-hop").is_none());
        assert!(h.get(header::TRANSFER_ENCODING).is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h["x-keep"], "1");
    }

    #[test]
    fn forwarded_for_is_appended() {
        let mut h = HeaderMap::new();
        append_forwarded_for(&mut h, "192.0.2.1".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
        append_forwarded_for(&mut h, "192.0.2.2".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "192.0.2.1, 192.0.2.2");
        h.append("x-forwarded-for", "192.0.2.3".parse().unwrap());
        append_forwarded_for(&mut h, "192.0.2.4".parse().unwrap());
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "192.0.2.1, 192.0.2.2, 192.0.2.3, 192.0.2.4");
    }
}
