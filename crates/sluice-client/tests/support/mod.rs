//! A real HTTP/1.1 server for the integration tests, on 127.0.0.1 with a port the OS picks.
//!
//! Each request names its client in an `x-client` header; the server counts requests per client
//! and asks a test-supplied function how to answer the n-th request (from 1) of that client.

#![allow(dead_code)]

#[cfg(feature = "reqwest")]
pub mod client;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// How the server answers one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub fn ok() -> Self {
        Reply { status: 200, headers: Vec::new() }
    }

    pub fn status(status: u16) -> Self {
        Reply { status, headers: Vec::new() }
    }

    pub fn limited(header: &'static str, value: impl Into<String>) -> Self {
        Reply { status: 429, headers: vec![(header, value.into())] }
    }

    /// A 429 with several headers.
    pub fn limited_with(headers: &[(&'static str, String)]) -> Self {
        Reply { status: 429, headers: headers.to_vec() }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub client: String,
    pub method: Method,
    pub body: Bytes,
}

type Responder = dyn Fn(u32) -> Reply + Send + Sync;

pub struct TestServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<oneshot::Sender<()>>,
}

impl TestServer {
    pub async fn start(respond: impl Fn(u32) -> Reply + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local test port");
        let addr = listener.local_addr().expect("local address");
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let counts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let respond: Arc<Responder> = Arc::new(respond);
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (seen2, counts2) = (seen.clone(), counts.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = &mut stopped => break,
                };
                let (seen, counts, respond) = (seen2.clone(), counts2.clone(), respond.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (seen, counts, respond) = (seen.clone(), counts.clone(), respond.clone());
                    async move {
                        let client = req
                            .headers()
                            .get("x-client")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("anonymous")
                            .to_string();
                        let method = req.method().clone();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let n = {
                            let mut counts = counts.lock().unwrap();
                            let n = counts.entry(client.clone()).or_insert(0);
                            *n += 1;
                            *n
                        };
                        seen.lock().unwrap().push(Seen { client, method, body });
                        let reply = respond(n);
                        let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
                        *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
                        for (name, value) in reply.headers {
                            response.headers_mut().append(name, value.parse().unwrap());
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        TestServer { addr, seen, stop: Some(stop) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Requests received from `client`.
    pub fn seen(&self, client: &str) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.client == client).cloned().collect()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An address on which nothing listens: bound, then released.
pub async fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local test port");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    format!("http://{addr}/")
}

/// The IMF-fixdate of `unix` seconds, and the same instant in the RFC 850 and asctime formats.
pub fn three_formats(unix: u64) -> [String; 3] {
    let imf = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix));
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let (wkday, rest) = imf.split_once(", ").unwrap();
    let parts: Vec<&str> = rest.split(' ').collect();
    let (day, month, year, time) = (parts[0], parts[1], parts[2], parts[3]);
    let long = match wkday {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    let rfc850 = format!("{long}, {day}-{month}-{} {time} GMT", &year[2..]);
    let asctime = format!("{wkday} {month} {:>2} {time} {year}", day.trim_start_matches('0'));
    [imf, rfc850, asctime]
}
