//! TLS on the listener (`[server.tls]`): a certificate chain and its key, PEM files, served
//! with rustls's safe defaults (TLS 1.2 and 1.3 only), HTTP/1.1 inside.
//!
//! A plaintext request sent to the TLS port is answered — 400 in plain HTTP, saying the port
//! speaks TLS — rather than left to hang in a handshake that never starts.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice_config::TlsFiles;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
pub use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The acceptor for `files`: the chain and the key read and checked against each other; an
/// error names the file and what is wrong with it.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let cert_path = files.cert.display();
    let key_path = files.key.display();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("server.tls.cert: {cert_path}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("server.tls.cert: {cert_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("server.tls.cert: {cert_path}: no PEM certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("server.tls.key: {key_path}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("server.tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("server.tls.key: {key_path} does not go with server.tls.cert {cert_path}: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The first byte of a TLS connection: a handshake record.
const HANDSHAKE: u8 = 0x16;

/// The answer to a plaintext request on the TLS port.
const PLAINTEXT: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
connection: close\r\ncontent-length: 60\r\n\r\nThis port speaks TLS: send the request again with https://.\n";

/// The TLS stream of a client that opened `stream`, or `None` (answered, if it spoke plain
/// HTTP; a failed handshake is logged at debug level and closed).
pub async fn handshake(acceptor: &TlsAcceptor, mut stream: TcpStream) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1) if first[0] != HANDSHAKE => {
            let _ = stream.write_all(PLAINTEXT).await;
            let _ = stream.shutdown().await;
            return None;
        }
        Ok(1) => {}
        _ => return None,
    }
    match acceptor.accept(stream).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            tracing::debug!(target: "sluice::tls", error = %e, "a TLS handshake failed");
            None
        }
    }
}
