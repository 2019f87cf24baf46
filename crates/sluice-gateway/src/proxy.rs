//! Forwarding admitted requests to the upstream: pooled connections, streamed bodies.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use http_body_util::Either;

use sluice_config::{ForwardedHeader, StageTimeouts, TimeoutsOverride, UnderscoreHeaders};
use sluice_http::identity::Client;
use sluice_http::meter::Metered;
use sluice_upstream::hop_by_hop::strip_hop_by_hop;
use sluice_upstream::pool::{ConnPool, SWEEP_EVERY, SendError};
use sluice_upstream::socket::TcpConnect;
use sluice_upstream::timeouts::Timeouts;
use sluice_upstream::tls::{AnyConnect, TlsConnect, tls_failure};

use crate::body::{ClientBodyError, ReplayBody};
use crate::error::GatewayError;
use crate::respond::{self, Body};

/// `sluice_upstream_tls_errors_total`'s family.
pub type TlsErrors = prometheus_client::metrics::family::Family<
    crate::observe::ReasonLabels,
    prometheus_client::metrics::counter::Counter,
>;

/// A worker thread's connections to one upstream, over TCP or TLS, sending replayable request
/// bodies.
type Pool = ConnPool<AnyConnect, ReplayBody>;

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
    /// How long a request may wait to connect (then 502), for the response head (then 504) and
    /// inside the response body (then the client's connection is cut), unless its route says
    /// otherwise.
    timeouts: StageTimeouts,
    /// How a connection is opened: TCP, or TLS for an `https://` upstream (asking for HTTP/1.1:
    /// the connector of WebSocket tunnels, and of the pools unless `http2`).
    connect: AnyConnect,
    /// `https` or `http`: the `:scheme` of a request sent in HTTP/2.
    scheme: http::uri::Scheme,
    /// Requests go in HTTP/2, as streams of one connection per worker thread.
    http2: bool,
    /// `sluice_upstream_tls_errors_total`, by reason: connections whose TLS failed.
    tls_errors: Option<TlsErrors>,
}

thread_local! {
    /// This thread's pools, by upstream id (a few: an entry per upstream configuration loaded).
    static POOLS: std::cell::RefCell<Vec<(u64, Arc<Pool>)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The task sweeping this thread's pools ([`ConnPool::sweep`]), on the thread's runtime.
    static SWEEPER: std::cell::RefCell<Option<tokio::task::JoinHandle<()>>> = const { std::cell::RefCell::new(None) };
}

/// Starts the task that sweeps this thread's pools, unless it runs already: on a gateway worker
/// (a runtime of one thread) it runs on this thread, where the pools are. A sweeper that has
/// ended means the runtime it ran on has shut down: the pools' connections were registered with
/// that runtime and cannot be used on another, so they go too.
fn ensure_sweeper() {
    SWEEPER.with_borrow_mut(|sweeper| {
        match sweeper {
            Some(task) if !task.is_finished() => return,
            Some(_) => POOLS.with_borrow_mut(Vec::clear),
            None => {}
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        *sweeper = Some(runtime.spawn(async {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                POOLS.with_borrow(|pools| pools.iter().for_each(|(_, pool)| pool.sweep()));
            }
        }));
    });
}

/// Pools kept per thread; older ones (from configurations reloaded away) are dropped.
const POOLS_PER_THREAD: usize = 4;

impl Upstream {
    /// A client for `url` (`http://host:port`), waiting at most `timeout` to connect, for
    /// response headers and, inside a response body, for its next bytes.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, GatewayError> {
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        Self::with_tls(url, StageTimeouts::all(nanos), None, None)
    }

    /// The same upstream spoken to in HTTP/2 (`[upstream] http2 = true`).
    pub fn speaking_http2(self) -> Self {
        Self { http2: true, ..self }
    }

    /// [`Upstream::new`] for the `[upstream]` of a configuration: an `https://` one checked
    /// against its `ca` (or the system's roots), with its client certificate if it has one.
    pub fn of_config(u: &sluice_config::Upstream) -> Result<Self, GatewayError> {
        let upstream = Self::with_tls(&u.url, u.timeouts, u.ca.as_deref(), u.client_cert.as_ref())?;
        Ok(if u.http2 { upstream.speaking_http2() } else { upstream })
    }

    fn with_tls(
        url: &str,
        timeouts: StageTimeouts,
        ca: Option<&std::path::Path>,
        client_cert: Option<&sluice_config::TlsPair>,
    ) -> Result<Self, GatewayError> {
        let bad = |reason: String| GatewayError::UpstreamUrl { url: url.to_owned(), reason };
        let uri: Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let authority = uri.authority().cloned().ok_or_else(|| bad("it has no host".into()))?;
        let scheme = uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTP);
        let connect = if scheme == http::uri::Scheme::HTTPS {
            let port = authority.port_u16().unwrap_or(443);
            let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| bad(e.to_string()))?;
            let config = crate::tls::upstream_client(ca, client_cert).map_err(bad)?;
            AnyConnect::Tls(TlsConnect::new(format!("{}:{port}", authority.host()), name, config))
        } else {
            AnyConnect::Tcp(TcpConnect::new(authority.to_string()))
        };
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { id, authority, timeouts, connect, scheme, http2: false, tls_errors: None })
    }

    /// `host:port` of the upstream.
    pub fn authority(&self) -> &http::uri::Authority {
        &self.authority
    }

    /// Counts the connections whose TLS fails in `family`, by reason.
    pub fn counting_tls_errors(self, family: TlsErrors) -> Self {
        Self { tls_errors: Some(family), ..self }
    }

    /// This thread's pool for this upstream.
    fn pool(&self) -> Arc<Pool> {
        ensure_sweeper();
        POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            if let Some((_, p)) = pools.iter().find(|(id, _)| *id == self.id) {
                return p.clone();
            }
            if pools.len() >= POOLS_PER_THREAD {
                pools.remove(0);
            }
            let connect = if self.http2 { self.connect.http2() } else { self.connect.clone() };
            let p = Arc::new(Pool::new(connect));
            pools.push((self.id, p.clone()));
            p
        })
    }

    /// Sends `req` (its body streamed) and returns the upstream's response (streamed), or a
    /// 502/504 JSON answer when the upstream is down or slow. A request body the client broke or
    /// let stall is answered 400 or 408 (see [`ClientBodyError`]): the upstream request was
    /// aborted and its connection closed, never reused, whatever part of the body it received.
    pub async fn forward(&self, req: Request<ReplayBody>, client: &Client, forwarding: &Forwarding) -> Response<Body> {
        self.send(req, client, forwarding, &TimeoutsOverride::NONE).await.unwrap_or_else(|failed| failed.answer)
    }

    /// The timeouts of a request whose route sets `route`'s (over this upstream's).
    fn timeouts(&self, route: &TimeoutsOverride) -> Timeouts {
        let t = route.over(self.timeouts);
        Timeouts {
            connect: Duration::from_nanos(t.connect),
            first_byte: Duration::from_nanos(t.first_byte),
            idle: Duration::from_nanos(t.idle),
        }
    }

    /// [`Upstream::forward`], with the stages its route bounds (`timeouts`) in place of this
    /// upstream's, saying how it failed when it did (for passive health checks and retries), the
    /// answer to give ready in the failure.
    pub async fn send(
        &self,
        req: Request<ReplayBody>,
        client: &Client,
        forwarding: &Forwarding,
        timeouts: &TimeoutsOverride,
    ) -> Result<Response<Body>, Failure> {
        let timeouts = self.timeouts(timeouts);
        let (mut parts, body) = req.into_parts();
        if let Err(e) = self.addressed(&mut parts) {
            return Err(Failure { kind: FailureKind::Client, answer: e.answer() });
        }
        strip_hop_by_hop(&mut parts.headers);
        forwarding.apply(&mut parts.headers, client);
        let sent = if self.http2 {
            // Every request goes as a stream; its body, of any length, in DATA frames.
            if let Err(e) = self.in_absolute_form(&mut parts) {
                return Err(Failure { kind: FailureKind::Client, answer: e.answer() });
            }
            self.pool().send_multiplexed(Request::from_parts(parts, body), timeouts).await
        } else if http_body::Body::is_end_stream(&body) {
            parts.version = http::Version::HTTP_11;
            // A request without a body goes on the proxy's own connections (see
            // `sluice_upstream::h1`), whose response heads come without their hop-by-hop fields.
            self.pool().send_bodiless(&parts, timeouts).await
        } else {
            parts.version = http::Version::HTTP_11;
            // A body of unknown length goes on chunked, whatever the method: hyper's client would
            // otherwise send a GET's body as none, and the upstream would act on another request
            // than the one that was limited.
            if http_body::Body::size_hint(&body).exact().is_none() {
                parts.headers.remove(header::CONTENT_LENGTH);
                parts.headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
            }
            self.pool().send(Request::from_parts(parts, body), timeouts).await.map(|mut res| {
                strip_hop_by_hop(res.headers_mut());
                res
            })
        };
        match sent {
            Ok(res) => {
                let (mut parts, body) = res.into_parts();
                // The client spoke HTTP/1.1 to sluice, whatever the upstream spoke to sluice.
                parts.version = http::Version::HTTP_11;
                Ok(Response::from_parts(parts, Either::Right(Box::new(Metered::new(body)))))
            }
            Err(SendError::Timeout) => Err(Failure {
                kind: FailureKind::Timeout,
                answer: respond::error(504, "gateway_timeout", "The upstream service did not answer in time."),
            }),
            Err(e) => match ClientBodyError::cause_of(&e) {
                Some(cut) => Err(Failure { kind: FailureKind::Client, answer: respond::answer(cut.answer()) }),
                None => {
                    self.failed(&e);
                    let kind = match e {
                        SendError::Connect(_) => FailureKind::NotSent,
                        _ => FailureKind::Broken,
                    };
                    Err(Failure {
                        kind,
                        answer: respond::error(502, "bad_gateway", "The upstream service is unavailable."),
                    })
                }
            },
        }
    }
}

/// How a request to the upstream failed, and the answer to give for it.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The client's answer (502, 504, or the client's own fault: 400, 408).
    pub answer: Response<Body>,
}

/// What went wrong sending a request to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No connection could be opened (refused, reset, TLS failed): nothing of the request was
    /// sent, so it can go to another target.
    NotSent,
    /// No response head came in time.
    Timeout,
    /// The exchange broke after the request was (maybe) sent.
    Broken,
    /// The client's fault (its body broke or stalled; a target that cannot be forwarded): the
    /// upstream is not to blame.
    Client,
}

impl Upstream {
    /// An active health check: `GET path` with this upstream as `Host`, on the pool of the
    /// calling thread; healthy when a 2xx or 3xx comes, whole, within `timeout`.
    pub async fn probe(&self, path: &str, timeout: Duration) -> bool {
        let Ok(req) = Request::get(path).header(header::HOST, self.authority.as_str()).body(ReplayBody::empty()) else {
            return false;
        };
        let (mut parts, body) = req.into_parts();
        let asked = async {
            let res = if self.http2 {
                if self.in_absolute_form(&mut parts).is_err() {
                    return false;
                }
                self.pool().send_multiplexed::<()>(Request::from_parts(parts, body), timeout).await
            } else {
                self.pool().send_bodiless::<()>(&parts, timeout).await
            };
            match res {
                // Read to its end: the connection goes back to the pool.
                Ok(res) => {
                    let ok = res.status().is_success() || res.status().is_redirection();
                    http_body_util::BodyExt::collect(res.into_body()).await.is_ok() && ok
                }
                Err(_) => false,
            }
        };
        tokio::time::timeout(timeout, asked).await.unwrap_or(false)
    }

    /// `parts` addressed to this upstream: the target in origin form (`/path?query`: the
    /// connection is the upstream's already; a target in origin form, the usual case, is sent as
    /// it came, parsed once) and a `Host` (this upstream's when the request has none).
    fn addressed(&self, parts: &mut http::request::Parts) -> Result<(), Unforwardable> {
        if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
            let mut origin = http::uri::Parts::default();
            origin.path_and_query =
                Some(parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/")));
            let Ok(uri) = Uri::from_parts(origin) else { return Err(Unforwardable) };
            parts.uri = uri;
        }
        if !parts.headers.contains_key(header::HOST)
            && let Ok(host) = HeaderValue::from_str(self.authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        Ok(())
    }

    /// `parts` (addressed) as HTTP/2 sends them: the target in absolute form, this upstream's
    /// scheme and the request's `Host` as `:scheme` and `:authority`, and no `Host` field beside
    /// them (HTTP/2 readers take `:authority`; two places for one value is one too many).
    fn in_absolute_form(&self, parts: &mut http::request::Parts) -> Result<(), Unforwardable> {
        let authority = match parts.headers.remove(header::HOST) {
            Some(host) => http::uri::Authority::try_from(host.as_bytes()).map_err(|_| Unforwardable)?,
            None => self.authority.clone(),
        };
        let mut absolute = http::uri::Parts::default();
        absolute.scheme = Some(self.scheme.clone());
        absolute.authority = Some(authority);
        absolute.path_and_query = parts.uri.path_and_query().cloned();
        parts.uri = Uri::from_parts(absolute).map_err(|_| Unforwardable)?;
        parts.version = http::Version::HTTP_2;
        Ok(())
    }

    /// Logs and counts a connection to the upstream that failed in its TLS, saying why (an
    /// unknown issuer, an expired certificate, another name than the URL's...).
    fn failed(&self, error: &(dyn std::error::Error + 'static)) {
        if let Some(reason) = tls_failure(error) {
            tracing::warn!(target: "sluice::upstream", upstream = %self.authority, reason, error = %error, "upstream TLS failed");
            if let Some(family) = &self.tls_errors {
                family.get_or_create(&crate::observe::ReasonLabels { reason }).inc();
            }
        }
    }

    /// Sends the admitted WebSocket upgrade `parts` to the upstream, on a connection of its own,
    /// and relays the connection when the upstream switches protocols ([`crate::tunnel`]).
    pub async fn tunnel(
        &self,
        mut parts: http::request::Parts,
        upgrade: crate::tunnel::ClientUpgrade,
        client: &Client,
        forwarding: &Forwarding,
        idle: Duration,
    ) -> Response<Body> {
        if let Err(e) = self.addressed(&mut parts) {
            return e.answer();
        }
        forwarding.apply(&mut parts.headers, client);
        let first_byte = Duration::from_nanos(self.timeouts.first_byte);
        crate::tunnel::open(&self.connect, parts, upgrade.0, first_byte, idle).await
    }
}

/// A request target that has no origin form to send.
#[derive(Debug)]
struct Unforwardable;

impl Unforwardable {
    fn answer(self) -> Response<Body> {
        respond::error(400, "bad_request", "The request target cannot be forwarded.")
    }
}

/// How the upstream is told who the client is.
///
/// The upstream reads identity from headers; a client must not be able to write them. From a
/// peer that is not a trusted proxy, every identity header it sent is dropped (`X-Forwarded-For`,
/// `Forwarded`, `X-Real-IP`, the user header). From a trusted proxy, the forwarding header it
/// writes is kept and the other one dropped (it would be the client's own). Then the client, as
/// sluice resolved it, is appended to the configured forwarding header, so the rightmost entry
/// an upstream reads is the client.
#[derive(Debug, Clone)]
pub struct Forwarding {
    /// The forwarding header sluice writes: the one its trusted proxies write.
    header: ForwardedHeader,
    /// Identity headers believed only from trusted proxies (the user header, plan headers).
    identity: Vec<HeaderName>,
    /// What happens to header names with `_` (dropped by default: WSGI reads `X_User` as
    /// `X-User`).
    underscores: UnderscoreHeaders,
    /// Headers sluice reads (keyed headers, the token header), besides the identity headers:
    /// never forwarded spelled with `_`, even when other such names are.
    read: Vec<String>,
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static(ForwardedHeader::XForwardedFor.name());
static FORWARDED: HeaderName = HeaderName::from_static(ForwardedHeader::Forwarded.name());
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

impl Forwarding {
    /// Writes `header`; `user_header` (if any) is an identity header.
    pub fn new(header: ForwardedHeader, user_header: Option<&str>) -> Self {
        Self::with_identity(header, user_header.into_iter())
    }

    /// Writes `header`; every name of `identity` (the user header, plan headers) is believed only
    /// from trusted proxies, so it is dropped when anyone else sends it.
    pub fn with_identity<'a>(header: ForwardedHeader, identity: impl Iterator<Item = &'a str>) -> Self {
        let mut names: Vec<HeaderName> = identity.filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok()).collect();
        names.dedup();
        Self { header, identity: names, underscores: UnderscoreHeaders::Drop, read: Vec::new() }
    }

    /// The same, doing `underscores` with header names that contain `_`; a spelling of a header
    /// in `read` (or of an identity header) is dropped whatever `underscores` says.
    pub fn with_underscores<'a>(self, underscores: UnderscoreHeaders, read: impl Iterator<Item = &'a str>) -> Self {
        let mut read: Vec<String> = read.map(str::to_ascii_lowercase).collect();
        // And the header sluice writes for the upstream: `sluice_soft_limited` is the soft-limit
        // mark to a WSGI or Rails application, which reads `_` and `-` alike.
        let soft = sluice_http::headers::SOFT_LIMITED;
        read.extend(
            [X_FORWARDED_FOR.as_str(), FORWARDED.as_str(), X_REAL_IP.as_str(), soft.as_str()].map(String::from),
        );
        read.extend(self.identity.iter().map(|h| h.as_str().to_owned()));
        read.sort();
        read.dedup();
        Self { underscores, read, ..self }
    }

    /// Rewrites the identity headers of a request from `client` for the upstream.
    ///
    /// ```
    /// use sluice_gateway::proxy::Forwarding;
    /// use sluice_http::identity::Client;
    /// let fwd = Forwarding::new(sluice_config::ForwardedHeader::Forwarded, Some("x-user-id"));
    /// let mut h = http::HeaderMap::new();
    /// h.insert("x-user-id", "admin".parse().unwrap());
    /// h.insert("x-forwarded-for", "6.6.6.6".parse().unwrap());
    /// h.insert("forwarded", "for=6.6.6.6".parse().unwrap());
    /// let ip = "2001:db8::7".parse().unwrap();
    /// fwd.apply(&mut h, &Client { ip, grouped: ip, peer_trusted: false });
    /// assert!(h.get("x-user-id").is_none() && h.get("x-forwarded-for").is_none());
    /// assert_eq!(h["forwarded"], "for=\"[2001:db8::7]\"");
    /// ```
    pub fn apply(&self, headers: &mut HeaderMap, client: &Client) {
        let (ours, other) = match self.header {
            ForwardedHeader::XForwardedFor => (&X_FORWARDED_FOR, &FORWARDED),
            ForwardedHeader::Forwarded => (&FORWARDED, &X_FORWARDED_FOR),
        };
        // Which identity headers came, in one pass over the names: most requests carry none, and
        // removing an absent header still hashes its name.
        let (mut has_ours, mut has_other, mut has_real_ip, mut has_identity) = (false, false, false, false);
        let mut has_underscore = false;
        for name in headers.keys() {
            if name.as_str().contains('_') {
                has_underscore = true;
            } else if name == ours {
                has_ours = true;
            } else if name == other {
                has_other = true;
            } else if name == X_REAL_IP {
                has_real_ip = true;
            } else if self.identity.iter().any(|h| h == name) {
                has_identity = true;
            }
        }
        if has_other {
            headers.remove(other);
        }
        if has_underscore {
            self.drop_underscored(headers);
        }
        if !client.peer_trusted {
            if has_ours {
                headers.remove(ours);
                has_ours = false;
            }
            if has_real_ip {
                headers.remove(&X_REAL_IP);
            }
            if has_identity {
                for h in &self.identity {
                    headers.remove(h);
                }
            }
        }
        let header = self.header;
        let write = |out: &mut Vec<u8>| match (header, client.ip) {
            (ForwardedHeader::XForwardedFor, IpAddr::V4(v4)) => push_ipv4(out, v4),
            (ForwardedHeader::XForwardedFor, IpAddr::V6(v6)) => out.extend_from_slice(v6.to_string().as_bytes()),
            (ForwardedHeader::Forwarded, IpAddr::V4(v4)) => {
                out.extend_from_slice(b"for=");
                push_ipv4(out, v4);
            }
            (ForwardedHeader::Forwarded, IpAddr::V6(v6)) => out.extend_from_slice(format!("for=\"[{v6}]\"").as_bytes()),
        };
        append_entry(headers, has_ours.then_some(ours), ours, write);
    }
}

impl Forwarding {
    /// Removes the header names with `_` that must not reach the upstream: every one by default,
    /// and with `underscore_headers = "forward"` those that spell a header sluice reads.
    fn drop_underscored(&self, headers: &mut HeaderMap) {
        let doomed: Vec<HeaderName> = headers
            .keys()
            .filter(|n| n.as_str().contains('_'))
            .filter(|n| {
                self.underscores == UnderscoreHeaders::Drop
                    || self.read.iter().any(|r| r.len() == n.as_str().len() && r == &n.as_str().replace('_', "-"))
            })
            .cloned()
            .collect();
        for name in doomed {
            headers.remove(&name);
        }
    }
}

/// Appends the entry `write` writes to the list `name` holds (`present`: `Some(name)` when the
/// message has such a header): several header lines are one list, so every entry is kept, in
/// order, in one line. Written in a buffer the thread keeps, then copied once into the value.
fn append_entry(
    headers: &mut HeaderMap,
    present: Option<&HeaderName>,
    name: &HeaderName,
    write: impl FnOnce(&mut Vec<u8>),
) {
    thread_local! {
        static JOINED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let value = JOINED.with_borrow_mut(|joined| {
        joined.clear();
        if let Some(name) = present {
            for line in headers.get_all(name) {
                let line = line.as_bytes().trim_ascii();
                if !line.is_empty() {
                    joined.extend_from_slice(line);
                    joined.extend_from_slice(b", ");
                }
            }
        }
        write(joined);
        let value = HeaderValue::from_bytes(joined);
        // A long list from a client is not kept for the thread's lifetime.
        if joined.capacity() > 4096 {
            *joined = Vec::new();
        }
        value
    });
    if let Ok(v) = value {
        headers.insert(name.clone(), v);
    }
}

/// `ip` in dotted decimal, as its `Display` writes it, without the formatting machinery (which
/// cost a proxied request more than a thousand instructions).
fn push_ipv4(out: &mut Vec<u8>, ip: std::net::Ipv4Addr) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        if octet >= 100 {
            out.push(b'0' + octet / 100);
        }
        if octet >= 10 {
            out.push(b'0' + octet / 10 % 10);
        }
        out.push(b'0' + octet % 10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_are_written_as_display_writes_them() {
        let mut cases: Vec<std::net::Ipv4Addr> =
            ["0.0.0.0", "255.255.255.255", "10.0.100.9", "1.22.103.240", "199.9.10.99"]
                .map(|a| a.parse().unwrap())
                .to_vec();
        cases.extend((0..=255u8).map(|o| std::net::Ipv4Addr::new(o, 255 - o, o / 3, o.wrapping_mul(7))));
        for ip in cases {
            let mut out = Vec::new();
            push_ipv4(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    #[test]
    fn a_runtime_that_shut_down_takes_its_connections_with_it() {
        let up = Upstream::new("http://127.0.0.1:9", Duration::from_secs(1)).unwrap();
        let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let first = runtime().block_on(async { up.pool() });
        let again = runtime().block_on(async { up.pool() });
        assert!(!Arc::ptr_eq(&first, &again), "a pool of a runtime that is gone was handed to another");
        let same = runtime().block_on(async { Arc::ptr_eq(&up.pool(), &up.pool()) });
        assert!(same, "one runtime keeps its pool");
    }

    fn client(ip: &str, trusted: bool) -> Client {
        let ip = ip.parse().unwrap();
        Client { ip, grouped: ip, peer_trusted: trusted }
    }

    #[test]
    fn a_trusted_chain_is_kept_and_the_client_appended() {
        let fwd = Forwarding::new(ForwardedHeader::XForwardedFor, Some("x-user-id"));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "192.0.2.1".parse().unwrap());
        h.append("x-forwarded-for", "192.0.2.3".parse().unwrap());
        h.insert("x-user-id", "alice".parse().unwrap());
        h.insert("forwarded", "for=6.6.6.6".parse().unwrap());
        fwd.apply(&mut h, &client("192.0.2.3", true));
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "192.0.2.1, 192.0.2.3, 192.0.2.3");
        assert_eq!(h["x-user-id"], "alice");
        // The header the proxies do not write is the client's own: dropped.
        assert!(h.get("forwarded").is_none());
    }

    #[test]
    fn an_untrusted_peer_cannot_name_anyone() {
        let fwd = Forwarding::new(ForwardedHeader::XForwardedFor, Some("x-user-id"));
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-forwarded-for", "1.1.1.1"),
            ("x-real-ip", "2.2.2.2"),
            ("x-user-id", "admin"),
            ("forwarded", "for=3.3.3.3"),
        ] {
            h.insert(k, v.parse().unwrap());
        }
        fwd.apply(&mut h, &client("203.0.113.9", false));
        assert_eq!(h["x-forwarded-for"], "203.0.113.9");
        for gone in ["x-real-ip", "x-user-id", "forwarded"] {
            assert!(h.get(gone).is_none(), "{gone} reached the upstream");
        }
        let fwd = Forwarding::new(ForwardedHeader::Forwarded, None);
        let mut h = HeaderMap::new();
        h.insert("forwarded", "for=1.1.1.1".parse().unwrap());
        fwd.apply(&mut h, &client("203.0.113.9", false));
        assert_eq!(h["forwarded"], "for=203.0.113.9");
    }
}
