//! TLS to the upstream (`url = "https://..."`): rustls over the pool's TCP connections, the
//! upstream's name (SNI and the certificate's check) from its URL, HTTP/1.1 by ALPN (or HTTP/2:
//! [`TlsConnect::http2`]).

use std::io;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::socket::{Connect, Socket, TcpConnect};

impl Socket for Box<TlsStream<TcpStream>> {}

/// TLS over [`TcpConnect`]: the handshake checks the upstream's certificate against `config`'s
/// roots and `name`.
#[derive(Clone)]
pub struct TlsConnect {
    tcp: TcpConnect,
    connector: TlsConnector,
    name: ServerName<'static>,
    /// Asks for `h2` by ALPN, and refuses a connection whose upstream does not agree to it.
    http2: bool,
}

impl std::fmt::Debug for TlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnect").field("tcp", &self.tcp).field("name", &self.name).finish_non_exhaustive()
    }
}

impl TlsConnect {
    /// Connections to `authority` (`host:port`) in TLS with `config`, checking the certificate
    /// against `name` (the URL's host). `config`'s ALPN is set to HTTP/1.1.
    pub fn new(authority: String, name: ServerName<'static>, mut config: rustls::ClientConfig) -> Self {
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self { tcp: TcpConnect::new(authority), connector: TlsConnector::from(Arc::new(config)), name, http2: false }
    }

    /// The same connections asking for HTTP/2 (`h2`) by ALPN instead: a handshake in which the
    /// upstream does not pick it fails (an HTTP/1.1 server would not understand the preface).
    pub fn http2(&self) -> Self {
        let mut config = rustls::ClientConfig::clone(self.connector.config());
        config.alpn_protocols = vec![b"h2".to_vec()];
        Self { connector: TlsConnector::from(Arc::new(config)), http2: true, ..self.clone() }
    }
}

impl Connect for TlsConnect {
    /// Boxed: a TLS session is some kilobytes, and a plain TCP connection held beside it in
    /// [`AnyConnect`]'s socket must not carry that size through every move of a connection.
    type Socket = Box<TlsStream<TcpStream>>;

    async fn connect(&self) -> io::Result<Box<TlsStream<TcpStream>>> {
        let tcp = self.tcp.connect().await?;
        let tls = self.connector.connect(self.name.clone(), tcp).await?;
        if self.http2 && tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(io::Error::new(io::ErrorKind::InvalidData, NotHttp2));
        }
        Ok(Box::new(tls))
    }
}

/// An upstream asked for HTTP/2 by ALPN did not pick it.
#[derive(Debug, thiserror::Error)]
#[error("the upstream did not agree to HTTP/2 (ALPN h2) in its TLS handshake")]
pub struct NotHttp2;

/// Either of the two: what a gateway whose upstream is `http://` or `https://` opens.
#[derive(Debug, Clone)]
pub enum AnyConnect {
    /// Plain TCP.
    Tcp(TcpConnect),
    /// TLS over TCP.
    Tls(TlsConnect),
}

impl AnyConnect {
    /// The same connections, for HTTP/2: TLS asks for it by ALPN; TCP is unchanged (HTTP/2 with
    /// prior knowledge needs nothing of the socket).
    pub fn http2(&self) -> Self {
        match self {
            AnyConnect::Tcp(c) => AnyConnect::Tcp(c.clone()),
            AnyConnect::Tls(c) => AnyConnect::Tls(c.http2()),
        }
    }
}

impl Connect for AnyConnect {
    type Socket = tokio_util::either::Either<TcpStream, Box<TlsStream<TcpStream>>>;

    async fn connect(&self) -> io::Result<Self::Socket> {
        use tokio_util::either::Either;
        match self {
            AnyConnect::Tcp(c) => c.connect().await.map(Either::Left),
            AnyConnect::Tls(c) => c.connect().await.map(Either::Right),
        }
    }
}

impl<A: Socket, B: Socket> Socket for tokio_util::either::Either<A, B> {
    fn is_stale(&mut self) -> bool {
        match self {
            tokio_util::either::Either::Left(a) => a.is_stale(),
            tokio_util::either::Either::Right(b) => b.is_stale(),
        }
    }
}

/// Why a connection's TLS failed, as metrics and logs name it, when `error` (or what caused it)
/// is a TLS error: `unknown_issuer`, `expired`, `not_valid_for_name`, `bad_certificate` (any
/// other certificate error), `no_http2` (asked for by ALPN, not agreed to) or `handshake`.
pub fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<NotHttp2>() {
            return Some("no_http2");
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(match tls {
                rustls::Error::InvalidCertificate(c) => match c {
                    rustls::CertificateError::UnknownIssuer => "unknown_issuer",
                    rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => "expired",
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. } => "not_valid_for_name",
                    _ => "bad_certificate",
                },
                _ => "handshake",
            });
        }
        // The exchange keeps the I/O error it failed on as a value, not as its source (and a
        // send error is transparent: its source is the exchange's).
        use crate::h1::connection::ExchangeError;
        let exchange = match e.downcast_ref::<crate::pool::SendError>() {
            Some(crate::pool::SendError::Exchange(x)) => Some(x),
            _ => e.downcast_ref::<ExchangeError>(),
        };
        let io = match exchange {
            Some(ExchangeError::Lost(io) | ExchangeError::Io(io)) => Some(io),
            _ => e.downcast_ref::<io::Error>(),
        };
        if let Some(reason) = io.and_then(|io| io.get_ref()).and_then(|inner| tls_failure(inner)) {
            return Some(reason);
        }
        cause = e.source();
    }
    None
}
