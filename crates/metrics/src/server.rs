//! `GET /metrics` over HTTP/1.1 (HTTPS with mutual TLS when the cluster has `[tls]`),
//! for Prometheus to scrape.

use std::sync::{Arc, Mutex};

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use megastore_config::{TlsConfig, resolve_address};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::tls::TlsListener;

/// Why the endpoint cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address does not resolve.
    #[error("metrics address: {0}")]
    Address(String),
    /// The address could not be bound.
    #[error("cannot listen on {0} for metrics: {1}")]
    Bind(String, String),
    /// The `[tls]` files are unusable for the metrics endpoint.
    #[error("metrics TLS: {0}")]
    Tls(String),
}

/// Called before each scrape, to bring gauges read from elsewhere up to date.
type Refresh = Arc<dyn Fn() + Send + Sync>;

/// The registry as Prometheus text.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, registry);
    text
}

/// A running metrics endpoint; stops when shut down or dropped.
pub struct MetricsServer {
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `registry` at `GET /metrics` on `address` (call inside a tokio runtime);
    /// `refresh` runs before each scrape. With `tls` (the cluster's `[tls]`), over
    /// mutual TLS: HTTPS, and a client certificate from the cluster's CA is required.
    pub async fn start(
        address: &str,
        registry: Registry,
        refresh: Option<Refresh>,
        tls: Option<&TlsConfig>,
    ) -> Result<Self, MetricsError> {
        let tls = tls.map(crate::tls::server_config).transpose()?;
        let socket = resolve_address(address).map_err(MetricsError::Address)?;
        let listener = TcpListener::bind(socket)
            .await
            .map_err(|e| MetricsError::Bind(address.to_string(), e.to_string()))?;
        let registry = Arc::new(Mutex::new(registry));
        let scrape = move || {
            let registry = Arc::clone(&registry);
            let refresh = refresh.clone();
            async move {
                if let Some(refresh) = refresh {
                    refresh();
                }
                let text = encode(&registry.lock().unwrap_or_else(|p| p.into_inner()));
                (
                    [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                    text,
                )
                    .into_response()
            }
        };
        let router = axum::Router::new().route("/metrics", get(scrape));
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let served = match tls {
            None => tokio::spawn(async move {
                let serving = axum::serve(listener, router).with_graceful_shutdown(shutdown);
                if let Err(e) = serving.await {
                    tracing::warn!("metrics endpoint failed: {e}");
                }
            }),
            Some(config) => {
                let listener = TlsListener::new(listener, config)
                    .map_err(|e| MetricsError::Bind(address.to_string(), e.to_string()))?;
                tokio::spawn(async move {
                    let serving = axum::serve(listener, router).with_graceful_shutdown(shutdown);
                    if let Err(e) = serving.await {
                        tracing::warn!("metrics endpoint failed: {e}");
                    }
                })
            }
        };
        Ok(Self {
            stop: Some(stop),
            served: Some(served),
        })
    }

    /// Stops serving.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            let _ = served.await;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
