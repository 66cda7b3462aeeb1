//! How a process speaks gRPC: plaintext, or mutual TLS (rustls) when the config has a
//! `[tls]` section — one place that makes every server and every channel, so no
//! endpoint is left out.

use std::time::Duration;

use megastore_config::{ClusterConfig, TlsConfig};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};

/// Why TLS cannot be set up, naming the file or address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// A certificate or key file cannot be read.
    #[error("tls: cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A PEM file holds no PEM block.
    #[error("tls: {path} is not a PEM file (no -----BEGIN line)")]
    NotPem {
        /// The file.
        path: String,
    },
    /// rustls refused the settings.
    #[error("tls: {0}")]
    Tls(String),
    /// An address is not usable as an endpoint.
    #[error("bad address {address:?}: {message}")]
    Address {
        /// The address.
        address: String,
        /// Why.
        message: String,
    },
}

/// How many ping intervals a connection's ping may go unanswered before the
/// connection is dropped: more than one, so that a peer busy for a moment on a loaded
/// machine is not cut off.
const KEEPALIVE_MISSES: u32 = 3;

/// The shortest interval between a channel's pings, whatever its connect timeout: a
/// short RPC timeout should not cut off a peer that stalls for a second.
const KEEPALIVE_INTERVAL_MIN: Duration = Duration::from_secs(1);

/// How often a server pings each client connection.
const SERVER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The TLS material of one process.
#[derive(Debug, Clone)]
struct Material {
    ca: Certificate,
    identity: Identity,
}

/// Plaintext, or mutual TLS with one CA.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    tls: Option<Material>,
}

fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, TransportError> {
    let bytes = std::fs::read(path).map_err(|e| TransportError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TransportError::NotPem {
            path: path.display().to_string(),
        });
    }
    Ok(bytes)
}

impl Transport {
    /// Plaintext gRPC.
    pub fn plain() -> Self {
        Self::default()
    }

    /// As `config` says: mutual TLS if it has a `[tls]` section (reading its files now).
    pub fn from_config(config: &ClusterConfig) -> Result<Self, TransportError> {
        config
            .tls
            .as_ref()
            .map_or(Ok(Self::plain()), Self::mutual_tls)
    }

    /// Mutual TLS with the files of `tls`.
    pub fn mutual_tls(tls: &TlsConfig) -> Result<Self, TransportError> {
        let ca = Certificate::from_pem(read_pem(&tls.ca_file)?);
        let identity = Identity::from_pem(read_pem(&tls.cert_file)?, read_pem(&tls.key_file)?);
        Ok(Self {
            tls: Some(Material { ca, identity }),
        })
    }

    /// Whether TLS is on.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// An endpoint for `address` (`host:port`): `https` with this process's certificate
    /// and the cluster CA, checking that the server's certificate is valid for `host`.
    pub fn endpoint(&self, address: &str) -> Result<Endpoint, TransportError> {
        let bad = |message: String| TransportError::Address {
            address: address.to_string(),
            message,
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| bad(e.to_string()))?;
        let Some(tls) = &self.tls else {
            return Ok(endpoint);
        };
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        endpoint
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(tls.ca.clone())
                    .identity(tls.identity.clone())
                    .domain_name(host),
            )
            .map_err(|e| bad(e.to_string()))
    }

    /// A lazily connected channel to `address`, which pings its connection every
    /// `connect_timeout` (at least every second) and drops it when a ping goes
    /// unanswered for three times that: a peer behind a black hole (a partition that
    /// drops packets rather than refusing them) is then reconnected to, instead of
    /// being written to on a connection TCP keeps retrying with growing pauses (tens of
    /// seconds after a minute of partition, minutes after longer), which would leave
    /// the peer unreachable long after the partition healed (`crate::session`'s
    /// *Ends*).
    pub fn channel(
        &self,
        address: &str,
        connect_timeout: Duration,
    ) -> Result<Channel, TransportError> {
        let keepalive = connect_timeout.max(KEEPALIVE_INTERVAL_MIN);
        Ok(self
            .endpoint(address)?
            .connect_timeout(connect_timeout)
            .http2_keep_alive_interval(keepalive)
            .keep_alive_timeout(keepalive * KEEPALIVE_MISSES)
            .keep_alive_while_idle(true)
            .connect_lazy())
    }

    /// The connections `listener` accepts, with Nagle's algorithm off: gRPC messages are
    /// small and latency-bound, and Nagle's algorithm meeting delayed ACKs holds a
    /// reply back about 40 ms.
    pub fn incoming(listener: tokio::net::TcpListener) -> TcpIncoming {
        TcpIncoming::from(listener).with_nodelay(Some(true))
    }

    /// A server builder that, with TLS, serves only clients presenting a certificate
    /// signed by the cluster CA.
    pub fn server(&self) -> Result<Server, TransportError> {
        // A client gone silent (crashed with its host, or behind a black hole) is
        // dropped, and with it what its sessions hold.
        let builder = Server::builder()
            .http2_keepalive_interval(Some(SERVER_KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(SERVER_KEEPALIVE_INTERVAL * KEEPALIVE_MISSES));
        let Some(tls) = &self.tls else {
            return Ok(builder);
        };
        builder
            .tls_config(
                ServerTlsConfig::new()
                    .identity(tls.identity.clone())
                    .client_ca_root(tls.ca.clone()),
            )
            .map_err(|e| TransportError::Tls(e.to_string()))
    }
}
