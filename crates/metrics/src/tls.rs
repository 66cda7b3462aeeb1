//! The metrics endpoint over mutual TLS, when the cluster has `[tls]`: the same CA,
//! certificate and key as its gRPC endpoints, and a client certificate from that CA is
//! required (Prometheus: `tls_config { ca_file, cert_file, key_file }`).
//!
//! Handshakes run in their own tasks, bounded in time, so one slow client cannot hold
//! up the others' scrapes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use megastore_config::TlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::server::MetricsError;

/// The longest a TLS handshake may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

fn tls_error(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> MetricsError {
    MetricsError::Tls(format!("{what} {}: {e}", path.display()))
}

/// The server side of mutual TLS from the cluster's `[tls]` files.
pub(crate) fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, MetricsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&tls.ca_file)
        .map_err(|e| tls_error("reading", &tls.ca_file, e))?
    {
        let ca = ca.map_err(|e| tls_error("reading", &tls.ca_file, e))?;
        roots
            .add(ca)
            .map_err(|e| tls_error("using the CA in", &tls.ca_file, e))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| tls_error("using the CA in", &tls.ca_file, e))?;
    let chain = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(|e| tls_error("reading", &tls.cert_file, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error("reading", &tls.cert_file, e))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(|e| tls_error("reading", &tls.key_file, e))?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| MetricsError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls_error("using the certificate and key in", &tls.cert_file, e))?;
    Ok(Arc::new(config))
}

/// Accepts TCP connections and hands over those that completed a TLS handshake.
pub(crate) struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    pub(crate) fn new(
        tcp: TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (deliver, ready) = mpsc::channel(16);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!("metrics accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, deliver) = (acceptor.clone(), deliver.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = deliver.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "metrics TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "metrics TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local,
            ready,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_tls_files_are_named() {
        let dir = std::env::temp_dir().join(format!("metrics-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.pem");
        std::fs::write(&not_pem, b"not a certificate").unwrap();
        let tls = |ca: &std::path::Path| TlsConfig {
            ca_file: ca.to_path_buf(),
            cert_file: dir.join("node.pem"),
            key_file: dir.join("node-key.pem"),
        };
        let missing = dir.join("missing.pem");
        for (ca, named) in [(&missing, &missing), (&not_pem, &not_pem)] {
            let error = server_config(&tls(ca)).unwrap_err().to_string();
            assert!(
                error.contains(&named.display().to_string()),
                "{error} does not name {}",
                named.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
