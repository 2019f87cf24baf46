//! WebSockets relayed to the upstream, where a route allows them (`upgrades = ["websocket"]`).
//!
//! The upgrade request is routed and limited like any request; once admitted it goes to the
//! upstream on a connection of its own (never a pooled one). If the upstream switches protocols
//! (101), the client is answered 101 and bytes are relayed both ways until either side closes,
//! or nothing has passed for `[server] tunnel_idle_timeout`; any other answer goes back to the
//! client as it came. For as long as the relay lives it holds what the request held until its
//! response ended: its place in `max_in_flight` and its concurrency slots ([`Tunnel::hold`]).

use std::any::Any;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Empty, Full, Limited};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use sluice_upstream::hop_by_hop::strip_hop_by_hop;
use sluice_upstream::socket::Connect;
use sluice_upstream::tls::AnyConnect;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::respond::{self, Body};

/// The client's side of an admitted upgrade: put in the request's extensions by the gateway
/// when the route relays WebSockets.
#[derive(Clone)]
pub struct ClientUpgrade(pub OnUpgrade);

/// A relay that has started: in a 101 response's extensions, it takes what must live as long
/// as the relay does.
#[derive(Clone)]
pub struct Tunnel(mpsc::UnboundedSender<Box<dyn Any + Send>>);

impl Tunnel {
    /// Keeps `thing` until the relay ends (at once, when it has ended already).
    pub fn hold(&self, thing: impl Any + Send) {
        let _ = self.0.send(Box::new(thing));
    }
}

/// The most of a refusing upstream's body passed back to the client.
const MAX_REFUSAL_BODY: usize = 64 * 1024;

/// Sends the upgrade request `head` (in origin form, its identity headers already set) to the
/// upstream `connect` opens (TCP or TLS) and relays the connection if it switches protocols.
pub async fn open(
    connect: &AnyConnect,
    mut head: http::request::Parts,
    client: OnUpgrade,
    timeout: Duration,
    idle: Duration,
) -> Response<Body> {
    strip_hop_by_hop(&mut head.headers);
    head.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    head.headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    head.version = http::Version::HTTP_11;
    let exchange = async {
        let socket = connect.connect().await.ok()?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(socket)).await.ok()?;
        tokio::spawn(conn.with_upgrades());
        sender.send_request(Request::from_parts(head, Empty::<Bytes>::new())).await.ok()
    };
    let mut res = match tokio::time::timeout(timeout, exchange).await {
        Ok(Some(res)) => res,
        Ok(None) => return respond::error(502, "bad_gateway", "The upstream service is unavailable."),
        Err(_) => return respond::error(504, "gateway_timeout", "The upstream service did not answer in time."),
    };
    if res.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The upstream refused the upgrade: its answer, as it came (the body bounded).
        let (mut parts, body) = res.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        parts.version = http::Version::HTTP_11;
        let read = tokio::time::timeout(timeout, Limited::new(body, MAX_REFUSAL_BODY).collect()).await;
        let Ok(Ok(body)) = read else {
            return respond::error(502, "bad_gateway", "The upstream service's answer could not be read.");
        };
        return Response::from_parts(parts, Either::Left(Full::new(body.to_bytes())));
    }
    let upstream = hyper::upgrade::on(&mut res);
    let (mut parts, _) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(relay(client, upstream, idle, rx));
    let mut answer = Response::from_parts(parts, Either::Left(Full::new(Bytes::new())));
    answer.extensions_mut().insert(Tunnel(tx));
    answer
}

/// Bytes both ways between the client and the upstream until either closes or `idle` passes
/// with nothing sent; whatever `held` receives meanwhile is dropped when it ends.
async fn relay(
    client: OnUpgrade,
    upstream: OnUpgrade,
    idle: Duration,
    mut held: mpsc::UnboundedReceiver<Box<dyn Any + Send>>,
) {
    let mut holding: Vec<Box<dyn Any + Send>> = Vec::new();
    let (Ok(client), Ok(upstream)) = tokio::join!(client, upstream) else { return };
    let (mut cr, mut cw) = tokio::io::split(TokioIo::new(client));
    let (mut ur, mut uw) = tokio::io::split(TokioIo::new(upstream));
    let (mut from_client, mut from_upstream) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut receiving = true;
    loop {
        tokio::select! {
            n = cr.read(&mut from_client) => match n {
                Ok(n) if n > 0 => if uw.write_all(&from_client[..n]).await.is_err() { break },
                _ => break,
            },
            n = ur.read(&mut from_upstream) => match n {
                Ok(n) if n > 0 => if cw.write_all(&from_upstream[..n]).await.is_err() { break },
                _ => break,
            },
            thing = held.recv(), if receiving => match thing {
                Some(thing) => holding.push(thing),
                None => receiving = false,
            },
            _ = tokio::time::sleep(idle) => break,
        }
    }
    // Either side closed (or went quiet): the other is closed too, and what was held goes.
    let _ = cw.shutdown().await;
    let _ = uw.shutdown().await;
    held.close();
    while let Ok(thing) = held.try_recv() {
        holding.push(thing);
    }
    drop(holding);
}
