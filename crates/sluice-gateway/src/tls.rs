//! TLS on the listener (`[server.tls]`): a certificate chain and its key, PEM files, served
//! with rustls's safe defaults (TLS 1.2 and 1.3 only), HTTP/2 or HTTP/1.1 inside by ALPN; more
//! pairs (`[[server.tls.certificates]]`) chosen by the name a client asks for (SNI); client
//! certificates checked against `client_ca` when it is given, the verified one's names read by
//! `tls:` key parts ([`peer_certificate`]).
//!
//! A plaintext request sent to the TLS port is answered — 400 in plain HTTP, saying the port
//! speaks TLS — rather than left to hang in a handshake that never starts.
//!
//! The certificate is reloaded ([`Certificates`]) on SIGHUP and when its files change: new
//! connections get the new one, open connections keep theirs, and a pair that does not load
//! (a key not yet written beside its new certificate, a typo) leaves the old one serving.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use std::path::Path;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sluice_config::TlsFiles;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
pub use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The acceptor for `files`: each chain and its key read and checked against each other; an
/// error names the file and what is wrong with it.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let default = pair(&provider, "server.tls", &files.cert, &files.key)?;
    let by_name = files
        .by_name
        .iter()
        .enumerate()
        .map(|(i, p)| pair(&provider, &format!("server.tls.certificates[{i}]"), &p.cert, &p.key))
        .collect::<Result<Vec<_>, _>>()?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("server.tls: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_verifier(&provider, ca, files.client_auth_optional)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(ByName { default, by_name }));
    // HTTP/2 where the client offers it, HTTP/1.1 otherwise.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Client certificates checked against the certificates of `ca` (webpki: the chain, the
/// validity dates, the key usage for client authentication); one is required unless `optional`.
fn client_verifier(
    provider: &Arc<CryptoProvider>,
    ca: &Path,
    optional: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let shown = ca.display();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("server.tls.client_ca: {shown}: {e}"))? {
        let cert = cert.map_err(|e| format!("server.tls.client_ca: {shown}: {e}"))?;
        roots.add(cert).map_err(|e| format!("server.tls.client_ca: {shown}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("server.tls.client_ca: {shown}: no PEM certificate in it"));
    }
    let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let builder = if optional { builder.allow_unauthenticated() } else { builder };
    builder.build().map_err(|e| format!("server.tls.client_ca: {shown}: {e}"))
}

/// The client configuration for an `https://` upstream: its certificate checked against `ca`
/// (PEM), or the system's roots (the file `SSL_CERT_FILE` names, else Debian's bundle); the
/// `client` pair presented when the upstream asks for one.
pub fn upstream_client(
    ca: Option<&Path>,
    client: Option<&sluice_config::TlsPair>,
) -> Result<rustls::ClientConfig, String> {
    const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
    let system = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let (path, field) = match ca {
        Some(ca) => (ca.to_path_buf(), "upstream.ca"),
        None => (system.unwrap_or_else(|| SYSTEM_BUNDLE.into()), "the system's certificates"),
    };
    let shown = path.display();
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&path).map_err(|e| format!("{field}: {shown}: {e}"))?;
    // A bundle may hold a certificate webpki cannot use; the others still serve.
    for cert in certs.flatten() {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(format!("{field}: {shown}: no usable PEM certificate in it"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("upstream: {e}"))?
        .with_root_certificates(roots);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some(pair) => {
            let (cert, key) = (pair.cert.display(), pair.key.display());
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pair.cert)
                .and_then(|i| i.collect())
                .map_err(|e| format!("upstream.client_cert: {cert}: {e}"))?;
            let key_der =
                PrivateKeyDer::from_pem_file(&pair.key).map_err(|e| format!("upstream.client_key: {key}: {e}"))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("upstream.client_key: {key} does not go with upstream.client_cert {cert}: {e}"))
        }
    }
}

/// What `tls:` key parts read of the certificate the client presented, which the handshake
/// verified; `None` when it presented none.
pub fn peer_certificate(conn: &rustls::ServerConnection) -> Option<sluice_http::identity::PeerCertificate> {
    names_of(conn.peer_certificates()?.first()?)
}

/// The names of the certificate `der`; `None` when it does not parse.
fn names_of(der: &CertificateDer<'_>) -> Option<sluice_http::identity::PeerCertificate> {
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    let names = cert.valid_dns_names().chain(cert.valid_uri_names());
    Some(sluice_http::identity::PeerCertificate::new(names, cert.subject()))
}

/// The chain in `cert` and the key in `key`, which must go together (`field` names them).
fn pair(provider: &CryptoProvider, field: &str, cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let (cert_path, key_path) = (cert.display(), key.display());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{field}.cert: {cert_path}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{field}.cert: {cert_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{field}.cert: {cert_path}: no PEM certificate in it"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{field}.key: {key_path}: {e}"))?;
    CertifiedKey::from_der(chain, key_der, provider)
        .map(Arc::new)
        .map_err(|e| format!("{field}.key: {key_path} does not go with {field}.cert {cert_path}: {e}"))
}

/// Picks the certificate for a handshake: the first of `by_name` whose certificate covers the
/// name the client asks for (SNI), else `default`.
#[derive(Debug)]
struct ByName {
    default: Arc<CertifiedKey>,
    by_name: Vec<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let asked = hello.server_name().and_then(|n| ServerName::try_from(n).ok());
        let covers = |key: &&Arc<CertifiedKey>| {
            let (Some(name), Some(der)) = (&asked, key.cert.first()) else { return false };
            webpki::EndEntityCert::try_from(der).is_ok_and(|ee| ee.verify_is_valid_for_subject_name(name).is_ok())
        };
        Some(self.by_name.iter().find(covers).unwrap_or(&self.default).clone())
    }
}

/// The listener's certificate as it stands, and where it was read from: swapped whole when it
/// is reloaded.
pub struct Certificates {
    current: ArcSwap<TlsAcceptor>,
    /// The files, and what they looked like (modification time, length) when last read.
    read: Mutex<(TlsFiles, Stamps)>,
}

/// Each file's modification time and length, when it could be read.
type Stamps = Vec<Option<(SystemTime, u64)>>;

fn stamps(files: &TlsFiles) -> Stamps {
    files
        .paths()
        .into_iter()
        .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
        .collect()
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates").finish_non_exhaustive()
    }
}

impl Certificates {
    /// The certificate of `files`, or why it cannot be used.
    pub fn load(files: &TlsFiles) -> Result<Self, String> {
        let acceptor = acceptor(files)?;
        Ok(Self { current: ArcSwap::from_pointee(acceptor), read: Mutex::new((files.clone(), stamps(files))) })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::clone(&self.current.load())
    }

    /// Reads `files` again (the configuration's, which a reload may have changed): the new
    /// pair serves new connections, or, when it does not load, the old one goes on and the
    /// error says why.
    pub fn reload(&self, files: &TlsFiles) -> Result<(), String> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let stamped = stamps(files);
        let acceptor = acceptor(files)?;
        self.current.store(Arc::new(acceptor));
        *read = (files.clone(), stamped);
        Ok(())
    }

    /// Watches the files every `every`: when either has changed since it was last read, the
    /// pair is reloaded (a pair that does not load yet is tried again at the next change).
    pub async fn watch(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            let (files, changed) = {
                let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
                let now = stamps(&read.0);
                let changed = now != read.1;
                // A failed load is not retried until the files change again.
                read.1 = now;
                (read.0.clone(), changed)
            };
            if !changed {
                continue;
            }
            match self.reload(&files) {
                Ok(()) => {
                    tracing::info!(target: "sluice::event", event = "tls_reload", "the TLS certificate changed on disk: reloaded")
                }
                Err(e) => {
                    tracing::warn!(target: "sluice::event", event = "tls_reload_refused", error = %e, "the TLS certificate changed on disk but does not load: the old one serves")
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rustls::pki_types::CertificateDer;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2_000)))]

        /// A client certificate is read from bytes the client chose (the handshake verified its
        /// chain, not that its extensions are what a reader expects): any bytes, a DER prefix
        /// and a long tail included, give names or none, never a panic.
        #[test]
        fn any_certificate_bytes_are_read_without_a_panic(
            prefix in prop_oneof![Just(vec![]), Just(vec![0x30, 0x82]), Just(vec![0x30, 0x81, 0xff])],
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let der = CertificateDer::from([prefix, bytes].concat());
            let _ = super::names_of(&der);
        }
    }
}
